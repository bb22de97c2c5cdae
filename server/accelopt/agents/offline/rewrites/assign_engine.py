"""Put work the kernel left to the compiler on an explicit engine.

`nl.exp(x)`, `nl.multiply(x, 2.0)`, `nl.copy(x)` and `engine=nisa.unknown_engine` let the compiler
pick an engine. When one engine is the bottleneck (the profile says which), spelling the
instruction as `nisa.activation` (Scalar Engine) or `nisa.tensor_scalar/tensor_copy(...,
engine=...)` moves it to a less-loaded one. GpSimd is offered only when no operand is in PSUM.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import ACTIVATION_FUNCTIONS, BINARY_FUNCTIONS, memory_of_expr
from accelopt.agents.offline.kernel_ir import KernelView, dotted, keyword, positional
from accelopt.agents.offline.patterns import Emitter, as_binary, render_with
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.rewrites.fuse_scalar_helpers import scalar_operand

ENGINE_WORDS = {"vector": "Vector Engine", "scalar": "Scalar Engine", "gpsimd": "GpSimd"}
ENGINE_CHOICE_APIS = {"tensor_scalar", "tensor_copy", "memset"}


class AssignEngine(Rewrite):
    name = "assign_engine"
    prior = 0.2
    summary = "place compiler-chosen elementwise work on an explicit, less-loaded engine"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for call in view.calls_in(view.func):
            item = self._site(view, call)
            if item is not None:
                found.append(item)
        return found

    def _site(self, view: KernelView, call: cst.Call) -> Site | Refusal | None:
        callee = view.callee(call)
        line = view.line(call)
        sid = site_id(self.name, view.where(call))
        operands = [
            a.value for a in call.args if a.keyword is None or a.keyword.value in ("data", "data1", "data2")
        ]
        # A call operand counts too: `nl.copy(nisa.nc_matmul(...))` reads the matmul's PSUM result.
        in_psum = any(
            memory_of_expr(view, o) == "psum"
            for o in operands
            if isinstance(o, (cst.Name, cst.Subscript, cst.Call))
        )
        engines = ["vector", "scalar"] + ([] if in_psum else ["gpsimd"])
        if callee.namespace == "nisa" and callee.name in ENGINE_CHOICE_APIS:
            engine = keyword(call, "engine")
            if engine is None or not (dotted(engine.value) or "").endswith("unknown_engine"):
                return None
            kind = f"nisa.{callee.name}"
            return self._make(sid, line, kind, callee.name, engines, ("explicit", call))
        if callee.namespace != "nl":
            return None
        if callee.name == "copy" and len(positional(call)) == 1:
            return self._make(sid, line, "nl.copy", "tensor_copy", engines, ("copy", call))
        if callee.name in ACTIVATION_FUNCTIONS and len(positional(call)) == 1:
            return self._make(sid, line, f"nl.{callee.name}", "activation", ["scalar"], ("activation", call))
        if callee.name in BINARY_FUNCTIONS:
            binary = as_binary(view, call)
            step = scalar_operand(view, binary) if binary is not None else None
            if step is None:
                return None
            if callee.name == "divide" and step[2]:
                return Refusal(
                    self.name, sid, line, "cannot move a scalar divided by a tile to tensor_scalar"
                )
            return self._make(
                sid, line, f"nl.{callee.name}", "tensor_scalar", engines, ("tensor_scalar", call, binary, step)
            )
        return None

    def _make(self, sid: str, line: int, kind: str, opcode: str, engines: list[str], payload: tuple) -> Site:
        return Site(
            self.name,
            sid,
            line,
            f"run the {kind} at line {line} on the {ENGINE_WORDS[engines[0]]}",
            description=f"Name the engine for the {kind} at line {line} instead of leaving it to the compiler.",
            variants=[{"engine": e} for e in engines],
            relieves=("vector", "scalar"),
            # The compiler's placement (it may spread the work over engines) is read from the
            # profile's line costs (engine_choice.py).
            runs_on=(opcode, ""),
            payload=payload,
        )

    def title_for(self, site: Site, params: Params) -> str:
        engine = str(params.get("engine", "vector"))
        return site.title.rsplit(" on the ", 1)[0] + f" on the {ENGINE_WORDS.get(engine, engine)}"

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        engine = str(params.get("engine", site.variants[0]["engine"]))
        if {"engine": engine} not in site.variants:
            raise NotApplicable(f"the {engine} engine cannot run this instruction")
        emit = Emitter(view)
        nisa = emit.alias("nisa")
        engine_expr = f"{nisa}.{engine}_engine"
        kind, call, *rest = site.payload
        kwargs = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if kind == "explicit":
            new = call.with_changes(
                args=[
                    a.with_changes(value=cst.parse_expression(engine_expr))
                    if a.keyword is not None and a.keyword.value == "engine"
                    else a
                    for a in call.args
                ]
            )
        elif kind == "copy":
            new = emit.call(
                f"{nisa}.tensor_copy",
                [emit.code(positional(call)[0].value)],
                {**kwargs, "engine": engine_expr},
            )
        elif kind == "activation":
            name = view.callee(call).name
            new = emit.call(
                f"{nisa}.activation",
                [],
                {"op": f"{emit.alias('nl')}.{name}", "data": positional(call)[0].value, **kwargs},
            )
        else:
            binary, (tile, operand, reverse) = rest
            extra: dict[str, str | cst.BaseExpression] = {
                "data": tile,
                "op0": f"{emit.alias('np')}.{binary.op}",
                "operand0": operand,
            }
            if reverse:
                extra["reverse0"] = "True"
            new = emit.call(f"{nisa}.tensor_scalar", [], {**extra, **kwargs, "engine": engine_expr})
        return render_with(view, emit, {id(call): new})

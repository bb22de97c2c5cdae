"""Move an instruction off a saturated engine onto another one the ISA allows.

assign_engine names an engine for work the kernel left to the compiler; this rewrite moves work
the kernel (or its generator) already pinned, which is what a compiler-generated kernel does:
- `tensor_tensor` runs on the Vector Engine by default and may run on GpSimd when no input is in
  PSUM (GpSimd cannot reach PSUM); `scalar_tensor_tensor` and `tensor_reduce` are documented for
  the Vector Engine only and are left where they are;
- `tensor_scalar`, `tensor_copy` and `memset` with an explicit engine may run on any of Vector,
  Scalar and GpSimd;
- `reciprocal` runs on Vector or Scalar (on Vector it is up to 8x slower, NKI ISA reference,
  nki.isa.reciprocal);
- an `activation` that only scales and shifts (`op=nl.copy`) is a `tensor_scalar` multiply-add,
  which moves it from the Scalar Engine to Vector or GpSimd.

Each site's variants are the engines it may move to; the planner takes the least busy one in the
profile, and the site's score rises with the busy share of the engine it relieves.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import memory_of_expr
from accelopt.agents.offline.kernel_ir import KernelView, argument, dotted, keyword, positional
from accelopt.agents.offline.patterns import Emitter, op_name, render_with
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.nki.apiversion import detect

ENGINE_WORDS = {"vector": "Vector Engine", "scalar": "Scalar Engine", "gpsimd": "GpSimd"}
# Legal engines per instruction (NKI ISA reference, the `engine` parameter of each API).
LEGAL = {
    "tensor_tensor": ("vector", "gpsimd"),
    "tensor_scalar": ("vector", "scalar", "gpsimd"),
    "tensor_copy": ("vector", "scalar", "gpsimd"),
    "memset": ("vector", "scalar", "gpsimd"),
    "reciprocal": ("vector", "scalar"),
}
# Where an instruction runs when the kernel names no engine (None: the compiler picks, which is
# assign_engine's business).
DEFAULT = {"tensor_tensor": "vector"}
_TILE_KEYWORDS = ("data", "data1", "data2", "operand1", "src", "dst", "bias", "scale")


class RebalanceEngines(Rewrite):
    name = "rebalance_engines"
    prior = 0.3
    summary = "move an instruction from a saturated engine to a less busy one the ISA allows"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for call in view.calls_in(view.func):
            callee = view.callee(call)
            if callee.namespace != "nisa":
                continue
            if callee.name == "activation":
                item = self._scale_shift(view, call)
            elif callee.name in LEGAL:
                item = self._move(view, call, callee.name)
            else:
                item = None
            if item is not None:
                found.append(item)
        return found

    def _move(self, view: KernelView, call: cst.Call, api: str) -> Site | Refusal | None:
        current = _engine_of(call) or DEFAULT.get(api)
        if current is None or current not in LEGAL[api]:
            return None
        psum = _reads_psum(view, call)
        targets = [e for e in LEGAL[api] if e != current and not (e == "gpsimd" and psum)]
        line = view.line(call)
        sid = site_id(self.name, view.where(call))
        if not targets:
            if psum:
                return Refusal(
                    self.name, sid, line, f"cannot move the {api} at line {line} to GpSimd: it reads PSUM"
                )
            return None
        return self._site(sid, line, f"nisa.{api}", current, targets, ("engine", call))

    def _scale_shift(self, view: KernelView, call: cst.Call) -> Site | Refusal | None:
        func = op_name(view, argument(call, 0, "op"))
        if func != "copy" or any(keyword(call, k) is not None for k in ("reduce_op", "reduce_res", "reduce_cmd")):
            return None
        if len(positional(call)) > 2 or argument(call, 1, "data") is None:
            return None
        psum = _reads_psum(view, call)
        targets = ["vector"] + ([] if psum else ["gpsimd"])
        return self._site(
            site_id(self.name, view.where(call)),
            view.line(call),
            "scale-and-shift activation",
            "scalar",
            targets,
            ("activation", call),
        )

    def _site(self, sid: str, line: int, kind: str, current: str, targets: list[str], payload: tuple) -> Site:
        return Site(
            self.name,
            sid,
            line,
            f"move the {kind} at line {line} from the {ENGINE_WORDS[current]} to the {ENGINE_WORDS[targets[0]]}",
            description=(
                f"The {kind} at line {line} runs on the {ENGINE_WORDS[current]}; the ISA lets "
                f"{' or '.join(ENGINE_WORDS[t] for t in targets)} run it, so a saturated engine hands work to an "
                "idle one and the two run side by side."
            ),
            variants=[{"engine": t} for t in targets],
            relieves=(current,) if current != "gpsimd" else ("vector",),
            payload=payload,
        )

    def title_for(self, site: Site, params: Params) -> str:
        engine = str(params.get("engine", site.variants[0]["engine"]))
        return site.title.rsplit(" to the ", 1)[0] + f" to the {ENGINE_WORDS.get(engine, engine)}"

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        engine = str(params.get("engine", site.variants[0]["engine"]))
        if {"engine": engine} not in site.variants:
            raise NotApplicable(f"the {engine} engine cannot run this instruction")
        emit = Emitter(view)
        # NKI 0.3+ names engines `nisa.engine.vector` (the `vector_engine` constants are deprecated).
        spelled = f"{engine}_engine" if detect(view.source).legacy else f"engine.{engine}"
        engine_expr = cst.parse_expression(f"{emit.alias('nisa')}.{spelled}")
        kind, call = site.payload
        new: cst.BaseExpression
        if kind == "engine":
            new = _with_engine(call, engine_expr)
        else:
            new = _as_tensor_scalar(view, emit, call, engine_expr)
        return render_with(view, emit, {id(call): new})


def _engine_of(call: cst.Call) -> str | None:
    kw = keyword(call, "engine")
    if kw is None:
        return None
    parts = (dotted(kw.value) or "").split(".")
    if parts[-1].endswith("_engine"):  # nisa.vector_engine
        name = parts[-1].removesuffix("_engine")
    elif len(parts) >= 2 and parts[-2] == "engine":  # nisa.engine.vector
        name = parts[-1]
    else:
        return None
    return name if name in ENGINE_WORDS else None


def _reads_psum(view: KernelView, call: cst.Call) -> bool:
    operands = [a.value for a in call.args if a.keyword is None or a.keyword.value in _TILE_KEYWORDS]
    return any(
        memory_of_expr(view, o) == "psum" for o in operands if isinstance(o, (cst.Name, cst.Subscript, cst.Call))
    )


def _with_engine(call: cst.Call, engine: cst.BaseExpression) -> cst.Call:
    if keyword(call, "engine") is not None:
        args = [
            a.with_changes(value=engine) if a.keyword is not None and a.keyword.value == "engine" else a
            for a in call.args
        ]
        return call.with_changes(args=args)
    new = cst.Arg(
        value=engine,
        keyword=cst.Name("engine"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    last = call.args[-1]
    if isinstance(last.comma, cst.Comma) and len(call.args) > 1:
        # One argument per line with a trailing comma: the new argument goes on its own line.
        between = call.args[-2].comma
        args = [*call.args[:-1], last.with_changes(comma=between), new.with_changes(comma=last.comma)]
    else:
        spaced = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args = [*call.args[:-1], last.with_changes(comma=spaced), new]
    return call.with_changes(args=args)


def _as_tensor_scalar(view: KernelView, emit: Emitter, call: cst.Call, engine: cst.BaseExpression) -> cst.BaseExpression:
    """`activation(op=copy, data, bias=b, scale=s)` as `tensor_scalar(data, multiply, s, add, b)`."""
    data = argument(call, 1, "data")
    scale = argument(call, 3, "scale")
    bias = argument(call, 2, "bias")
    assert data is not None
    legacy = detect(view.source).legacy
    ops = emit.alias("np") if legacy else emit.alias("nl")
    parts: list[str] = []
    dst = keyword(call, "dst")
    if dst is not None:
        parts.append(f"dst={view.code(dst.value)}")
    parts.append(f"data={view.code(data)}")
    steps = [(op, value) for op, value in (("multiply", scale), ("add", bias)) if value is not None]
    if not steps:
        steps = [("multiply", cst.Float("1.0"))]
    for index, (op, value) in enumerate(steps):
        parts += [f"op{index}={ops}.{op}", f"operand{index}={view.code(value)}"]
    for name in ("mask", "dtype"):
        kw = keyword(call, name)
        if kw is not None:
            parts.append(f"{name}={view.code(kw.value)}")
    parts.append(f"engine={view.code(engine)}")
    return cst.parse_expression(f"{emit.alias('nisa')}.tensor_scalar({', '.join(parts)})")

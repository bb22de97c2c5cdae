"""Fuse an elementwise chain by what it computes, not by how it is spelled.

The dataflow (dataflow.py) traces each value back through its single-use intermediates and says
what it computes (terms.py); instruction selection covers that with the engines' fused forms.
SiLU written as `activation(exp, scale=-1)` -> `tensor_scalar(add 1)` -> `reciprocal` ->
`multiply`, as `x / (1 + nl.exp(-x))` or as `x * sigmoid(x)` becomes one `activation(silu)`;
`exp(x * s + b)` one activation with scale and bias; `(x * a) + b` one two-op tensor_scalar;
`x * c + y` one scalar_tensor_tensor; `a * (1 / b)` one divide.

A site is offered only when the fused form takes fewer instructions than the chain, and only
after both were evaluated on the same random numbers and agree (the candidate is then checked by
the product like every other).
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.dataflow import Chain, chains_in, definitions_of
from accelopt.agents.offline.facts import memory_of_expr
from accelopt.agents.offline.instruction_selection import Instr, NoForm, select
from accelopt.agents.offline.kernel_ir import KernelView
from accelopt.agents.offline.patterns import Emitter, removal_edits, render_with
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.terms import Term, agree
from accelopt.nki.apiversion import detect


class FuseChain(Rewrite):
    name = "fuse_elementwise_chain"
    prior = 1.0
    summary = "fuse an elementwise chain, recognised by what it computes, into the engines' fused instructions"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[tuple[Chain, Site | Refusal]] = []
        for chain in chains_in(view):
            item = self._site(view, chain)
            if item is not None:
                found.append((chain, item))
        # A chain whose root is an intermediate of a longer fusable chain is part of that one.
        inlined = {
            id(p.stmt) for chain, item in found if isinstance(item, Site) for p in chain.producers
        }
        return [item for chain, item in found if id(chain.stmt) not in inlined]

    def _site(self, view: KernelView, chain: Chain) -> Site | Refusal | None:
        try:
            fused = select(chain.normal)
        except (NoForm, RecursionError):
            return None
        after = fused.count()
        if after >= chain.instructions:
            return None
        if chain.dst is not None and len(fused.inner()) > sum(p.alloc is not None for p in chain.producers):
            return None  # destination passing: every inner instruction needs a buffer the chain declared
        first, last = chain.lines
        where = f"line {first}" if first == last else f"lines {first}-{last}"
        sid = site_id(self.name, view.where(chain.root))
        forms = [i.describe() for i in (*fused.inner(), fused)]
        title = f"fuse the {chain.instructions}-instruction chain at {where} into " + (
            f"one {forms[0]}" if len(forms) == 1 else " + ".join(forms)
        )
        if _two_psum_inputs(view, chain, fused):
            return Refusal(self.name, sid, view.line(chain.root), f"cannot {title}: both tiles would be read from PSUM")
        check = agree(chain.term, fused.as_term())
        if not check.same:
            return Refusal(self.name, sid, view.line(chain.root), f"cannot {title}: the forms {check.reason}")
        return Site(
            self.name,
            sid,
            view.line(chain.root),
            title,
            description=(
                f"The chain at {where} computes {_shown(chain.normal)}; {after} fused instruction"
                f"{'s' if after > 1 else ''} compute the same in place of {chain.instructions}, without "
                "the intermediate tiles (checked on random inputs)."
            ),
            relieves=("vector", "scalar"),
            payload=(chain, fused),
        )

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        chain, fused = site.payload
        try:
            return _Writer(view, chain).render(fused)
        except cst.ParserSyntaxError as exc:  # a leaf's text that does not fit where it moved
            raise NotApplicable(f"the fused form could not be written: {exc.message}") from exc


def _two_psum_inputs(view: KernelView, chain: Chain, fused: Instr) -> bool:
    """A tile-tile instruction reads at most one of its inputs from PSUM (NKI ISA,
    nki.isa.tensor_tensor)."""
    for instr in (*fused.inner(), fused):
        if instr.kind not in ("tensor_tensor", "scalar_tensor_tensor"):
            continue
        sides = [c for c in (instr.data, instr.other) if c is not None and c.kind == "leaf" and c.term is not None]
        in_psum = [memory_of_expr(view, chain.leaf_nodes[c.term.key]) == "psum" for c in sides]  # type: ignore[union-attr]
        if sum(in_psum) > 1:
            return True
    return False


def _shown(term: Term) -> str:
    text = str(term)
    return text if len(text) <= 80 else text[:79] + "…"


class _Writer:
    """Writes the selected instructions in the kernel's own spelling: nested calls when the
    kernel's instructions return tiles, destination passing (reusing the buffers the chain's
    intermediates were declared with) when its root writes a `dst`."""

    def __init__(self, view: KernelView, chain: Chain) -> None:
        self.view = view
        self.chain = chain
        self.emit = Emitter(view)
        self.legacy = detect(view.source).legacy
        if not self.legacy and (view.alias_for("nisa") is None or view.alias_for("nl") is None):
            raise NotApplicable("the kernel does not import nki.isa and nki.language by name")
        self.mask = view.code(chain.mask) if chain.mask is not None else None

    def render(self, fused: Instr) -> str:
        chain = self.chain
        edits = removal_edits(definitions_of(chain))
        if chain.dst is None:
            edits[id(chain.root)] = cst.parse_expression(self.code(fused, outer=True))
            return render_with(self.view, self.emit, edits)
        # Destination passing: inner instructions write the buffers of removed intermediates.
        inner = fused.inner()
        buffers = [p for p in chain.producers if p.alloc is not None]
        if len(inner) > len(buffers):
            raise NotApplicable("the fused form needs more intermediate tiles than the chain declared")
        targets: dict[int, str] = {}
        statements: list[cst.BaseStatement] = []
        for instr, producer in zip(inner, buffers):
            assert producer.alloc is not None
            edits.pop(id(producer.alloc), None)  # the declaration stays: the buffer is reused
            target = self.view.code(producer.target)
            statements.append(cst.parse_statement(self.code(instr, dst=target, targets=targets) + "\n"))
            targets[id(instr)] = target
        root = self.code(fused, dst=self.view.code(chain.dst), targets=targets, outer=True)
        edits[id(chain.root)] = cst.parse_expression(root)
        if statements:

            def prepend(updated: cst.CSTNode, extra: list[cst.BaseStatement] = statements) -> list[cst.CSTNode]:
                return [*extra, updated]

            edits[id(chain.stmt)] = prepend
        return render_with(self.view, self.emit, edits)

    # --- spelling ----------------------------------------------------------------------------

    def code(
        self, instr: Instr, *, dst: str | None = None, targets: dict[int, str] | None = None, outer: bool = False
    ) -> str:
        targets = targets if targets is not None else {}
        if instr.kind == "leaf":
            assert instr.term is not None
            return self.view.code(self.chain.leaf_nodes[instr.term.key])
        if id(instr) in targets:
            return targets[id(instr)]
        nisa = self.emit.alias("nisa")
        args: list[tuple[str, str]] = []
        if dst is not None:
            args.append(("dst", dst))

        def sub(child: Instr | None) -> str:
            assert child is not None
            return self.code(child, targets=targets)

        if instr.kind == "activation":
            args += [("op", f"{self.emit.alias('nl')}.{instr.func}"), ("data", sub(instr.data))]
            if instr.bias is not None:
                args.append(("bias", self.operand(instr.bias)))
            if instr.scale is not None:
                args.append(("scale", self.operand(instr.scale)))
        elif instr.kind == "reciprocal":
            args.append(("data", sub(instr.data)))
        elif instr.kind == "tensor_scalar":
            args.append(("data", sub(instr.data)))
            for index, step in enumerate(instr.steps):
                args += [(f"op{index}", self.op(step.op)), (f"operand{index}", self.operand(step.operand))]
        elif instr.kind == "scalar_tensor_tensor":
            step = instr.steps[0]
            args += [
                ("data", sub(instr.data)),
                ("op0", self.op(step.op)),
                ("operand0", self.operand(step.operand)),
                ("op1", self.op(instr.op)),
                ("operand1", sub(instr.other)),
            ]
        else:
            args += [("data1", sub(instr.data)), ("data2", sub(instr.other)), ("op", self.op(instr.op))]
        if self.mask is not None:
            args.append(("mask", self.mask))
        if outer and self.chain.dtype is not None:
            args.append(("dtype", self.view.code(self.chain.dtype)))
        return f"{nisa}.{instr.kind}(" + ", ".join(f"{k}={v}" for k, v in args) + ")"

    def op(self, name: str) -> str:
        # Legacy kernels pass numpy ufuncs as ALU ops; NKI 0.3+ takes nki.language's.
        return f"{self.emit.alias('np')}.{name}" if self.legacy else f"{self.emit.alias('nl')}.{name}"

    def operand(self, term: Term) -> str:
        if term.is_const:
            assert term.value is not None
            return term.source or repr(float(term.value))
        return self.view.code(self.chain.leaf_nodes[term.key])

"""Split a loop whose body does two independent pieces of work into two loops over the same range.

`for i: a = load(x[i]); store(p[i], f(a)); b = load(y[i]); store(q[i], g(b))` becomes a loop
for each half: each loop's working set is half the body's, so its tiles get more buffers to
rotate through, and a rewrite refused on the mixed body (hoisting, widening) may act on one half.

Legal when no data flows between the halves in any iteration: the second half reads nothing the
first half writes (no name, no tensor), writes nothing the first half reads or writes, and a name
both halves bind is not carried from one iteration to the next (each binds it before reading
it). Then every statement sees the values it saw before, whatever the order of the iterations.
Only the splits the dataflow allows are offered, one site per split.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.kernel_ir import Access, KernelView, Loop, is_filler, names_in
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.rewrites.loop_fusion import _bound_before_read


class LoopFission(Rewrite):
    name = "loop_fission"
    # The timing model gives a split nothing by itself (a tile is live only from its first to its
    # last access, so independent halves never overlap in SBUF anyway, and each allocation keeps
    # its buffer pool): like loop interchange it is a step that lets other rewrites act on one
    # half (hoisting, widening), which the planner reaches through compositions.
    prior = 0.0
    summary = "split a loop into two when its body does two independent pieces of work"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for loop in view.loops:
            body = loop.body
            work = [s for s in body if not is_filler(s)]
            if len(work) < 2:
                continue
            for split in range(1, len(work)):
                first, second = work[:split], work[split:]
                line = view.line(second[0])
                sid = site_id(self.name, loop.line, line)
                try:
                    _check(view, loop, first, second)
                except NotApplicable:
                    continue  # most splits of a body are not independent: not worth a refusal each
                found.append(
                    Site(
                        self.name,
                        sid,
                        loop.line,
                        f"split the {loop.var} loop before line {line}",
                        description=(
                            f"Lines {view.line(first[0])}-{view.line(first[-1])} and "
                            f"{line}-{view.line(second[-1])} share no data: one loop each, so each "
                            "loop's tiles have SBUF to themselves."
                        ),
                        relieves=("latency",),
                        payload=(loop, split),
                    )
                )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        loop: Loop
        loop, split = site.payload
        work = [s for s in loop.body if not is_filler(s)]
        block = loop.node.body
        assert isinstance(block, cst.IndentedBlock)
        first = loop.node.with_changes(body=block.with_changes(body=work[:split]))
        second = loop.node.with_changes(
            body=block.with_changes(body=work[split:]),
            leading_lines=[],
        )
        return view.render({id(loop.node): [first, second]})


def _access_of(view: KernelView, body: list[cst.BaseStatement]) -> Access:
    """What a run of statements reads and changes, taken together."""
    acc = Access()
    for stmt in body:
        acc.update(view.access(stmt))
    return acc


def _check(view: KernelView, loop: Loop, first: list[cst.BaseStatement], second: list[cst.BaseStatement]) -> None:
    one, two = _access_of(view, first), _access_of(view, second)
    reads1, writes1, bound1 = one.reads, one.writes, one.rebinds
    reads2, writes2, bound2 = two.reads, two.writes, two.rebinds
    both = (bound1 & bound2) - {loop.var}
    for name in sorted(both):
        if not _bound_before_read(first, name) or not _bound_before_read(second, name):
            raise NotApplicable(f"{name} is carried from one iteration to the next")
    flow = (writes1 & reads2) - both - {loop.var}
    if flow:
        raise NotApplicable(f"the second part reads {', '.join(sorted(flow))}, which the first part writes")
    back = (writes2 & (reads1 | writes1)) - both - {loop.var}
    if back:
        raise NotApplicable(f"the second part writes {', '.join(sorted(back))}, which the first part uses")
    for stmt in (*first, *second):
        if isinstance(stmt, (cst.If, cst.While, cst.Try, cst.With)) or any(
            isinstance(s, cst.Return) for s in view.statements(stmt)
        ):
            raise NotApplicable(f"control flow at line {view.line(stmt)}")
    if not names_in(loop.node.iter).isdisjoint(writes1 | writes2):
        raise NotApplicable("the body changes what the range depends on")

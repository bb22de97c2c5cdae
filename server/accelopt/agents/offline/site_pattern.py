"""What a rewrite site looks like, independent of the names a kernel happens to use.

A lesson such as "preloading the loop-invariant operand of a matmul paid 1.3x" should steer the
next kernel with the same shape of code, whatever its tensors are called. So a site is described
by its rewrite and a structural fingerprint of the code it acts on:

- `calls`: the NKI API calls at the site (the statement's calls, or a loop's body for loop sites);
- `consumers`: the API calls that read what the site's statement writes (e.g. the `nc_matmul`
  that consumes a loaded tile), which says what role the site plays in the kernel;
- `depth`: how many loops surround the site; for a move on a loop (`<rewrite>:<loop line>`), how
  many surround that loop, wherever the site is anchored;
- `guessed`: for a loop site, whether the loop is already a block of a trip count the source does
  not give (an earlier blocking, widening or folding asserted that the shapes divide): acting on
  it again is a further guess about the input shapes, which is not the same bet as acting on a
  loop of the original kernel -- a lesson on one says little about the other.

The fingerprint is written into lessons as `pattern=<key>` (see summarizer.py) and read back by the
planner, so it crosses the memory as plain text and stays readable for an LLM planner too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import libcst as cst

from accelopt.agents.offline.catalogue import all_sites
from accelopt.agents.offline.kernel_ir import KernelView, Loop, base_name, view_of
from accelopt.agents.offline.rewrites.base import Site
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.search.kernel_text import instruction_name

# The kernel function of a module: the first def under a decorator that names nki (`@nki.jit`,
# `@nki.jit(...)`, `@nki.baremetal`), else the first top-level def.
_KERNEL_DEF = re.compile(r"^@[^\n]*\bnki\b[^\n]*\n(?:@[^\n]*\n)*def\s+(\w+)\s*\(", re.MULTILINE)
_ANY_DEF = re.compile(r"^def\s+(\w+)\s*\(", re.MULTILINE)
_KEY = re.compile(
    r"^(?P<rewrite>[a-z_]+)\[(?P<calls>[\w+]*)>(?P<consumers>[\w+]*)@(?P<depth>\d+)(?P<guessed>~guessed)?\]$"
)
_GUESSED = "~guessed"
# How much a lesson still says when one of the two sites is a guessed block and the other is not.
GUESSED_MISMATCH = 0.1
_TAG = re.compile(r"pattern=(\S+\])")


@dataclass(frozen=True)
class SitePattern:
    rewrite: str
    calls: frozenset[str]
    consumers: frozenset[str]
    depth: int
    guessed: bool = False

    @property
    def key(self) -> str:
        """e.g. 'preload_operand[load>nc_matmul@2]', 'block_accumulators[load>nc_matmul@2~guessed]'."""
        calls = "+".join(sorted(self.calls))
        consumers = "+".join(sorted(self.consumers))
        return f"{self.rewrite}[{calls}>{consumers}@{self.depth}{_GUESSED if self.guessed else ''}]"

    @classmethod
    def parse(cls, key: str) -> SitePattern | None:
        match = _KEY.match(key)
        if match is None:
            return None
        return cls(
            rewrite=match["rewrite"],
            calls=frozenset(filter(None, match["calls"].split("+"))),
            consumers=frozenset(filter(None, match["consumers"].split("+"))),
            depth=int(match["depth"]),
            guessed=match["guessed"] is not None,
        )

    def similarity(self, other: SitePattern) -> float:
        """1.0 for the same code shape, 0.0 for another rewrite; in between by what is shared."""
        if self.rewrite != other.rewrite:
            return 0.0
        depth = 1.0 if self.depth == other.depth else 0.5 if abs(self.depth - other.depth) == 1 else 0.0
        return (_jaccard(self.calls, other.calls) + _jaccard(self.consumers, other.consumers) + depth) / 3

    def match(self, other: SitePattern) -> float:
        """How much a lesson learned at a site of pattern `self` says about a site of pattern
        `other` (same rewrite): 0.25 for the rewrite alone up to 1.0 for the same code shape,
        and only GUESSED_MISMATCH when one is a guessed block and the other is not."""
        if self.guessed != other.guessed:
            return GUESSED_MISMATCH
        return 0.25 + 0.75 * self.similarity(other)


def pattern_in_text(text: str) -> SitePattern | None:
    """The pattern a lesson was tagged with (`pattern=<key>`), if any."""
    match = _TAG.search(text)
    return SitePattern.parse(match.group(1)) if match else None


def site_pattern(view: KernelView, site: Site) -> SitePattern:
    guessed = _on_a_guessed_block(view, site)
    stmt = _statement_at(view, site.line)
    if stmt is None:
        return SitePattern(site.rewrite, frozenset(), frozenset(), 0, guessed)
    loop = view.loop_of_node(stmt)
    depth = loop.depth() + 1 if loop is not None else 0
    if isinstance(stmt, cst.For):
        calls = _api_calls(view, stmt.body)
        return SitePattern(site.rewrite, calls, frozenset(), depth, guessed)
    assert isinstance(stmt, cst.SimpleStatementLine)  # _statement_at finds these and loop headers
    acted_on = _loop_of_site(view, site)
    if acted_on is not None:
        # A loop move anchored at a statement inside its loop (blocking a loop is anchored at the
        # operand load it widens): the depth is the loop's, as for a move anchored at its header.
        # The load sits at the same depth whichever output loop is blocked, so by the load's depth
        # blocking i0 and blocking i1 of a matmul looked alike, and blocking the same outer loop
        # of two kernels did not (one anchored at a load, the other at the header).
        depth = acted_on.depth()
    return SitePattern(site.rewrite, _api_calls(view, stmt), _consumers(view, stmt), depth, guessed)


def _loop_of_site(view: KernelView, site: Site) -> Loop | None:
    """The loop a loop site (`<rewrite>:<loop line>`) acts on; None for other sites."""
    _, _, where = site.id.partition(":")
    if not where.isdigit():
        return None
    return next((lp for lp in view.loops if lp.line == int(where)), None)


def _on_a_guessed_block(view: KernelView, site: Site) -> bool:
    """A loop site (`<rewrite>:<loop line>`) whose loop's trip count is not known from the source
    and is asserted, just before the loop, to be a multiple of something."""
    loop = _loop_of_site(view, site)
    if loop is None or loop.trip_expr is None or view.eval_int(loop.trip_expr) is not None:
        return False
    siblings = view.siblings(loop.node)
    index = next((i for i, s in enumerate(siblings) if s is loop.node), 0)
    before = siblings[index - 1] if index > 0 else None
    return (
        isinstance(before, cst.SimpleStatementLine)
        and any(isinstance(small, cst.Assert) for small in before.body)
        and "%" in view.code(before)
    )


@lru_cache(maxsize=256)
def patterns_of(text: str, kernel_name: str) -> dict[str, SitePattern]:
    """site id -> pattern, for every legal site of the catalogue in a kernel."""
    try:
        view = view_of(text, kernel_name)
    except NotApplicable:
        return {}
    with view.lock:
        return {site.id: site_pattern(view, site) for site in all_sites(text, kernel_name)}


def kernel_name_in(text: str) -> str | None:
    """The name of the kernel function in a module's text (experiences store only the text)."""
    match = _KERNEL_DEF.search(text) or _ANY_DEF.search(text)
    return match.group(1) if match else None


def rewrites_in(text: str) -> frozenset[str]:
    """The rewrites of the catalogue that could act on a kernel, from its module text alone."""
    name = kernel_name_in(text)
    if name is None:
        return frozenset()
    return frozenset(p.rewrite for p in patterns_of(text, name).values())


def pattern_of_site(
    text: str, kernel_name: str, rewrite: str | None, site_id: str | None
) -> SitePattern | None:
    found = patterns_of(text, kernel_name).get(site_id or "")
    return found if found is not None and found.rewrite == rewrite else None


# -- helpers -----------------------------------------------------------------------------------


def _statement_at(view: KernelView, line: int) -> cst.BaseStatement | None:
    """The simple statement that holds a call starting on `line`, else the loop header there."""
    header: cst.BaseStatement | None = None
    for stmt in view.statements():
        if isinstance(stmt, cst.SimpleStatementLine):
            if view.line(stmt) == line or any(view.line(c) == line for c in view.calls_in(stmt)):
                return stmt
        elif isinstance(stmt, cst.For) and view.line(stmt) == line:
            header = stmt
    return header


def _api_calls(view: KernelView, node: cst.CSTNode) -> frozenset[str]:
    names = set()
    for call in view.calls_in(node):
        name = _instruction(view, call)
        if name is not None:
            names.add(name)
    return frozenset(names)


def _instruction(view: KernelView, call: cst.Call) -> str | None:
    callee = view.callee(call)
    return instruction_name(callee.name) if callee.namespace in ("nl", "nisa") else None


def _written(view: KernelView, stmt: cst.SimpleStatementLine) -> set[str]:
    names: set[str] = set()
    for small in stmt.body:
        if isinstance(small, cst.Assign):
            for target in small.targets:
                name = base_name(target.target)
                if name:
                    names.add(name)
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            name = base_name(small.target)
            if name:
                names.add(name)
    for dst in view.destination_of_calls(stmt):
        name = base_name(dst)
        if name:
            names.add(name)
    return names


def _consumers(view: KernelView, stmt: cst.SimpleStatementLine) -> frozenset[str]:
    """The API calls, elsewhere in the kernel, that read a tensor this statement writes."""
    found: set[str] = set()
    for name in _written(view, stmt):
        for use in view.name_uses(name):
            if view.statement_of(use) is stmt:
                continue
            for ancestor in view.ancestors(use):
                if isinstance(ancestor, cst.Call) and (instruction := _instruction(view, ancestor)):
                    found.add(instruction)
                    break
                if isinstance(ancestor, cst.BaseStatement):
                    break
    return frozenset(found)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)

"""What every rewrite is: it lists the places in a kernel where it could act (legal sites, and the
tempting ones it refuses, with the reason), and turns (site, parameters) into new source text."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, ParamSpec, TypeVar

import libcst as cst

from accelopt.agents.offline.kernel_ir import KernelView, view_of
from accelopt.agents.offline.rewrites.errors import NotApplicable

Params = dict[str, int | float | str | bool]
Found = TypeVar("Found")
Args = ParamSpec("Args")


@dataclass(frozen=True)
class Resident:
    """What a rewrite keeps in SBUF across a loop, per partition: the product of `factors`
    (source expressions of the kernel: the trips of the loops a block spans, the tile's free
    size) elements of `dtype` (its source text: `w.dtype`, `np.float32`). The sizes come from
    the shapes the kernel is timed at (sizes.py): the same move fits at one size and spills at
    another."""

    factors: tuple[cst.BaseExpression, ...]
    dtype: str


@dataclass
class Site:
    """A place where a rewrite can act. `id` is stable for a given source text."""

    rewrite: str
    id: str
    line: int
    title: str  # e.g. "hoist the load of w out of the k loop"
    description: str = ""
    variants: list[Params] = field(default_factory=lambda: [{}])  # parameter choices, best guess first
    # Which bottleneck the change relieves: "hbm", "tensor", "vector", "scalar", "latency".
    relieves: tuple[str, ...] = ()
    # For a site whose variants are target engines: (opcode, engine) of the instruction as it
    # runs now ("" when the compiler picks), so the planner can weigh each target with the
    # timing model (engine_choice.py).
    runs_on: tuple[str, str] | None = None
    payload: Any = field(default=None, repr=False, compare=False)
    # For a move that keeps data resident in SBUF (a preloaded block): how much, see Resident.
    resident: Resident | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Refusal:
    """A place a rewrite considered and rejected."""

    rewrite: str
    id: str
    line: int
    reason: str


@dataclass(frozen=True)
class Place:
    """A place a rewrite considers: its Site when the analysis finds the change legal, else its
    Refusal, worded "cannot <title>: <reason>". Both carry the rewrite, the id and the line."""

    rewrite: str
    id: str
    line: int
    title: str

    def refused(self, reason: str) -> Refusal:
        return Refusal(self.rewrite, self.id, self.line, f"cannot {self.title}: {reason}")

    def site(
        self,
        *,
        title: str | None = None,
        line: int | None = None,
        description: str = "",
        variants: list[Params] | None = None,
        relieves: tuple[str, ...] = (),
        runs_on: tuple[str, str] | None = None,
        payload: Any = None,
        resident: Resident | None = None,
    ) -> Site:
        """The Site; `title` and `line` when they say more than the refusal would (the chosen
        variant, the line the change relieves)."""
        return Site(
            self.rewrite,
            self.id,
            self.line if line is None else line,
            self.title if title is None else title,
            description=description,
            variants=variants if variants is not None else [{}],
            relieves=relieves,
            runs_on=runs_on,
            payload=payload,
            resident=resident,
        )


class Rewrite(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    # How likely the change is to pay on its own, before the profile and the memory have a say
    # (0..1). Loop interchange is 0: it rarely helps by itself but enables hoisting and preloading.
    prior: ClassVar[float] = 0.5

    @abstractmethod
    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        """Every site considered, legal or refused."""

    @abstractmethod
    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        """The new module text; raise NotApplicable for parameters that do not fit this site."""

    def place(self, sid: str, line: int, title: str) -> Place:
        """A place this rewrite considers, which becomes its site or its refusal."""
        return Place(self.name, sid, line, title)

    # --- the public surface ----------------------------------------------------------------

    def analysed(self, view: KernelView) -> list[Site | Refusal]:
        """`analyse`, once per view."""
        with view.lock:
            if self.name not in view.analyses:
                view.analyses[self.name] = list(self.analyse(view))
            return view.analyses[self.name]

    def sites(self, source: str, kernel_name: str) -> list[Site]:
        try:
            view = view_of(source, kernel_name)
        except NotApplicable:
            return []
        return self.sites_in(view)

    def sites_in(self, view: KernelView) -> list[Site]:
        return [s for s in self.analysed(view) if isinstance(s, Site)]

    def site_named(self, source: str, kernel_name: str, site_id: str) -> Site | None:
        """The legal site with this id (rewrites whose sites are too many to list build it)."""
        return next((s for s in self.sites(source, kernel_name) if s.id == site_id), None)

    def refusals(self, source: str, kernel_name: str) -> list[Refusal]:
        view = view_of(source, kernel_name)
        return [s for s in self.analysed(view) if isinstance(s, Refusal)]

    def apply(self, source: str, kernel_name: str, site_id: str, params: Params | None = None) -> str:
        view = view_of(source, kernel_name)
        with view.lock:
            return self._apply(view, source, site_id, params)

    def _apply(self, view: KernelView, source: str, site_id: str, params: Params | None) -> str:
        for item in self.analysed(view):
            if item.id != site_id:
                continue
            if isinstance(item, Refusal):
                raise NotApplicable(item.reason)
            chosen = dict(item.variants[0] if params is None else params)
            text = self.transform(view, item, chosen)
            try:
                cst.parse_module(text)
            except cst.ParserSyntaxError as exc:  # a bug in the rewrite, never the kernel's fault
                raise NotApplicable(f"{self.name} produced text that does not parse: {exc.message}") from exc
            if text == source:
                raise NotApplicable(f"{self.name} would not change the kernel at {site_id}")
            return text
        raise NotApplicable(f"{self.name} has no site {site_id!r} in this kernel")


def reason_or(analysis: Callable[Args, Found], *args: Args.args, **kwargs: Args.kwargs) -> Found | str:
    """What `analysis(*args, **kwargs)` found, or the reason it gave (NotApplicable) why the
    rewrite cannot act there."""
    try:
        return analysis(*args, **kwargs)
    except NotApplicable as exc:
        return exc.reason


def site_id(*parts: object) -> str:
    return ":".join(str(p) for p in parts)

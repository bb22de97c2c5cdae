"""Several catalogue rewrites applied one after the other, as one plan.

The planner turns to compositions once the catalogue's one-step plans and the tuner's settings
at a beam kernel have all been judged (planner.py): a kernel two or three steps away is new even
when every kernel one step away is not. A composition is legal exactly when every step is legal
for the rewrite that owns it on the kernel the previous steps produced; it has no legality rules
of its own.

A composition is written as JSON text, a list of `[rewrite, site id, parameters]` steps, because
site ids name places in the kernel as it is at that step (each step's output is deterministic,
so the ids of a later step are stable too). `apply` realises any such text or refuses it with
the step at fault and its rewrite's reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from accelopt.agents.offline.kernel_ir import KernelView
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site
from accelopt.agents.offline.rewrites.errors import NotApplicable


@dataclass(frozen=True)
class Step:
    rewrite: str
    site: str
    params: tuple[tuple[str, int | float | str | bool], ...] = ()

    def as_json(self) -> list[object]:
        return [self.rewrite, self.site, dict(self.params)]


def composition_key(steps: tuple[Step, ...]) -> str:
    return json.dumps([s.as_json() for s in steps], separators=(",", ":"), sort_keys=True)


def parse_composition(key: str) -> tuple[Step, ...]:
    """The steps of a composition's text; NotApplicable, with what is wrong, for text that is not one."""
    try:
        raw = json.loads(key)
    except json.JSONDecodeError as exc:
        raise NotApplicable(f"a composition is a JSON list of [rewrite, site, params] steps: {exc.msg}") from exc
    steps: list[Step] = []
    if not isinstance(raw, list) or len(raw) < 2:
        raise NotApplicable("a composition has at least two [rewrite, site, params] steps")
    for number, item in enumerate(raw, 1):
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not isinstance(item[0], str)
            or not isinstance(item[1], str)
            or not isinstance(item[2], dict)
        ):
            raise NotApplicable(f"step {number} of the composition is not [rewrite, site, params]: {item!r}")
        steps.append(Step(item[0], item[1], tuple(sorted(item[2].items()))))
    return tuple(steps)


class Compose(Rewrite):
    """Not in the catalogue's list (compositions are what the planner turns to once the catalogue
    and the tuner have nothing new) but known to it by name, so the executor applies its plans.
    `lookup` finds a step's rewrite by name (the catalogue's own table)."""

    name = "compose"
    prior = 0.5
    summary = "apply two or more catalogue rewrites one after the other"

    def __init__(self, lookup: Callable[[str], Rewrite]) -> None:
        self._lookup = lookup

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        return []  # compositions are too many to list: the planner builds them (planner.py)

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        return self.realise(view.source, view.kernel_name, site.id)[0]

    def realise(self, source: str, kernel_name: str, key: str) -> tuple[str, list[Site]]:
        """The kernel a composition writes and each step's site, or NotApplicable naming the step."""
        current = source
        sites: list[Site] = []
        for number, step in enumerate(parse_composition(key), 1):
            if step.rewrite == self.name:
                raise NotApplicable(f"step {number} of the composition is itself a composition")
            try:
                rewrite = self._lookup(step.rewrite)
                site = rewrite.site_named(current, kernel_name, step.site)
                if site is None:
                    raise NotApplicable(f"{rewrite.name} has no site {step.site!r} here")
                current = rewrite.apply(current, kernel_name, step.site, dict(step.params))
            except NotApplicable as exc:
                raise NotApplicable(f"step {number} ({step.rewrite} at {step.site}): {exc.reason}") from exc
            sites.append(site)
        return current, sites

    def site_named(self, source: str, kernel_name: str, site_id: str) -> Site | None:
        try:
            _, sites = self.realise(source, kernel_name, site_id)
        except NotApplicable:
            return None
        steps = parse_composition(site_id)
        titles = [self._title(s, dict(step.params)) for s, step in zip(sites, steps, strict=True)]
        return composed_site(site_id, sites, titles)

    def _title(self, site: Site, params: Params) -> str:
        custom = getattr(self._lookup(site.rewrite), "title_for", None)
        return custom(site, params) if custom is not None else site.title

    def apply(self, source: str, kernel_name: str, site_id: str, params: Params | None = None) -> str:
        text, _ = self.realise(source, kernel_name, site_id)
        if text == source:
            raise NotApplicable(f"the composition {site_id!r} would not change the kernel")
        return text


def composed_site(key: str, sites: list[Site], titles: list[str]) -> Site:
    """The site of a composition: its steps' titles joined, what any of them relieves."""
    return Site(
        Compose.name,
        key,
        sites[0].line,
        "; then ".join(titles),
        description="Several catalogue rewrites one after the other (each legal for the rewrite "
        "that owns it, on the kernel the earlier ones wrote): " + "; then ".join(titles) + ".",
        relieves=tuple(dict.fromkeys(r for s in sites for r in s.relieves)),
    )

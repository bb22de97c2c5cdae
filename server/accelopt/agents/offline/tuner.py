"""The tuner: a kernel's tiling knobs set together, for when the catalogue's one-step plans are
used up.

A setting chooses, in this order, a loop order (interchange a perfect nest, or not), a tile size
(widen the tiles of a free-axis loop by a factor, or not), a number of tiles per block (block
an output-tile loop into several PSUM accumulators by a factor, or not) and, where the kernel
places its tiles itself (direct allocation, `ncc.sbuf.mod_alloc`), buffer counts (more physical
tiles for a tensor's logical tiles to rotate through, or not). Each choice is one of
the catalogue's parameterised rewrites at one of its sites, so a setting is legal exactly when
every step is legal for the rewrite that owns it, on the kernel the previous steps produced: the
tuner has no legality rules of its own, it asks the rewrites (their analysis finds the sites and
the factors that fit them, and refuses the rest with the reason).

A setting is written as text, e.g. `loop_interchange#0;widen_free_dim#1:factor=4`: the rewrite,
the ordinal of its site among that rewrite's sites on the kernel as it is at that step (site ids
name source lines, which the earlier steps move), and the parameters. `realise` turns such text
into a kernel or refuses it with a reason; `settings` enumerates the legal ones. As a rewrite
(`Tune`), every enumerated setting is a site, so the planner can hand settings out as plans and
the executor applies them like any other rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelopt.agents.offline.kernel_ir import KernelView
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site
from accelopt.agents.offline.rewrites.block_accumulators import BlockAccumulators
from accelopt.agents.offline.rewrites.buffer_count import BufferCount
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.rewrites.loop_interchange import LoopInterchange
from accelopt.agents.offline.rewrites.widen_free_dim import WidenFreeDim

# The knobs, in the order a setting applies them: the loop order decides which loops the later
# knobs see as innermost; the tile width decides how many tiles a block gathers.
# Buffer counts come last: they depend on no loop's shape, only on what the kernel allocates.
KNOBS: tuple[Rewrite, ...] = (LoopInterchange(), WidenFreeDim(), BlockAccumulators(), BufferCount())
_KNOB_BY_NAME = {k.name: k for k in KNOBS}
# Enumeration stops after this many legal settings (about a second of rewriting on a kernel of
# NKIBench's size); the planner hands them out a few per iteration.
MAX_SETTINGS = 48
MAX_STEPS = 3
# A knob on a loop whose trip count the source does not give writes an assertion that its factor
# divides the trip count: a guess about the input shapes. One guess per setting is what a single
# rewrite would make too; stacking them (a widened loop widened again) multiplies the factors and
# fails on shapes a single guess fits, so a setting may make one.
MAX_SHAPE_GUESSES = 1


@dataclass(frozen=True)
class Step:
    rewrite: str
    ordinal: int  # which of the rewrite's sites, on the kernel as it is before this step
    params: tuple[tuple[str, int | float | str | bool], ...] = ()

    def key(self) -> str:
        params = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.rewrite}#{self.ordinal}" + (f":{params}" if params else "")


@dataclass(frozen=True)
class Setting:
    steps: tuple[Step, ...]
    text: str  # the kernel with every step applied
    titles: tuple[str, ...]  # each step's title, as the rewrite words it
    relieves: tuple[str, ...]
    line: int  # the first step's site, in the original kernel

    def key(self) -> str:
        return setting_key(self.steps)

    @property
    def title(self) -> str:
        return "tune: " + "; ".join(self.titles)


def setting_key(steps: tuple[Step, ...]) -> str:
    return ";".join(step.key() for step in steps)


def parse_setting(key: str) -> tuple[Step, ...]:
    """The steps of a setting's text; NotApplicable, with what is wrong, for text that is not one."""
    steps: list[Step] = []
    for part in (p.strip() for p in key.split(";")):
        head, _, tail = part.partition(":")
        name, sep, ordinal = head.partition("#")
        if not sep or not ordinal.strip().isdigit():
            raise NotApplicable(f"tuner setting step {part!r} is not REWRITE#ORDINAL[:NAME=VALUE,...]")
        params: list[tuple[str, int | float | str | bool]] = []
        for pair in filter(None, (p.strip() for p in tail.split(","))):
            k, eq, v = pair.partition("=")
            if not eq:
                raise NotApplicable(f"tuner setting parameter {pair!r} is not NAME=VALUE")
            params.append((k.strip(), int(v) if v.strip().lstrip("-").isdigit() else v.strip()))
        steps.append(Step(name.strip(), int(ordinal), tuple(params)))
    return tuple(steps)


def shape_guesses(text: str) -> int:
    """The assertions about input shapes in a kernel (the knobs' rewrites write them as `assert`)."""
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("assert "))


def stacked_guess(before: str, after: str) -> bool:
    """Whether `after` asserts a divisibility of a trip count that is itself a quotient of one
    (`((N // 256) // 2) % 2 == 0`): the kernel it came from already guessed about that loop."""
    old = {line.strip() for line in before.splitlines()}
    new = [line.strip() for line in after.splitlines() if line.lstrip().startswith("assert ")]
    return any(line not in old and line.split(",")[0].count("//") >= 2 for line in new)


def _apply_step(text: str, kernel_name: str, step: Step, guesses_before: int | None = None) -> tuple[str, Site]:
    knob = _KNOB_BY_NAME.get(step.rewrite)
    if knob is None:
        raise NotApplicable(
            f"{step.rewrite!r} is not a tuning knob (the knobs are: {', '.join(_KNOB_BY_NAME)})"
        )
    sites = knob.sites(text, kernel_name)
    if step.ordinal >= len(sites):
        refused = knob.refusals(text, kernel_name)
        why = f"; it refuses: {refused[0].reason}" if refused else ""
        raise NotApplicable(
            f"{knob.name} has {len(sites)} legal site(s) here, not a site #{step.ordinal}{why}"
        )
    site = sites[step.ordinal]
    params: Params = dict(step.params)
    allowed = [dict(v) for v in site.variants]
    if params not in allowed:
        def spelled(p: Params) -> str:
            return ",".join(f"{k}={v}" for k, v in p.items()) or "no parameters"

        choices = "; ".join(spelled(a) for a in allowed)
        raise NotApplicable(f"{site.title}: {spelled(params)} is not legal here (legal: {choices})")
    new = knob.apply(text, kernel_name, site.id, params)
    if stacked_guess(text, new):
        raise NotApplicable(
            f"{site.title} would guess again about a trip count an earlier change already divided "
            "(its factor would have to divide the quotient of a guess the kernel already makes)"
        )
    if guesses_before is not None and shape_guesses(new) - guesses_before > MAX_SHAPE_GUESSES:
        raise NotApplicable(
            f"{site.title} would be a second guess about the input shapes in one setting (its factor "
            "must divide a trip count the source does not give, on top of an earlier step's)"
        )
    return new, site


def realise(text: str, kernel_name: str, key: str) -> Setting:
    """The kernel a setting gives, or NotApplicable saying which step is illegal and why."""
    steps = parse_setting(key)
    rank = {k.name: i for i, k in enumerate(KNOBS)}
    order = [rank[s.rewrite] for s in steps if s.rewrite in rank]
    if order != sorted(order):
        raise NotApplicable(
            f"tuner setting {key!r} is out of order (loop order, then tile size, then block, then buffer count)"
        )
    current, line = text, 0
    titles: list[str] = []
    relieves: list[str] = []
    guesses = shape_guesses(text)
    for number, step in enumerate(steps, 1):
        try:
            current, site = _apply_step(current, kernel_name, step, guesses)
        except NotApplicable as exc:
            raise NotApplicable(f"step {number} ({step.key()}) of the setting: {exc.reason}") from exc
        knob = _KNOB_BY_NAME[step.rewrite]
        custom = getattr(knob, "title_for", None)
        titles.append(custom(site, dict(step.params)) if custom is not None else site.title)
        relieves.extend(r for r in site.relieves if r not in relieves)
        line = line or site.line
    return Setting(steps, current, tuple(titles), tuple(relieves), line)


def settings(text: str, kernel_name: str, limit: int = MAX_SETTINGS, depth: int = MAX_STEPS) -> list[Setting]:
    """Legal settings of up to `depth` steps, knobs in order (a knob may act on several loops, or
    twice on one loop when its rewrite allows: a block of 2 blocked again is a block of 4), each
    giving a kernel none of the earlier ones gave. Depth first, so a prefix is computed once and
    shared by the settings that extend it; the deepest settings of a branch come first."""
    found: list[Setting] = []
    seen = {text}
    guesses = shape_guesses(text)

    def extend(current: str, parts: Setting | None, first_knob: int) -> None:
        steps = parts.steps if parts is not None else ()
        if len(steps) >= depth:
            return
        for knob_index in range(first_knob, len(KNOBS)):
            knob = KNOBS[knob_index]
            for ordinal, site in enumerate(knob.sites(current, kernel_name)):
                for variant in site.variants:
                    if len(found) >= limit:
                        return
                    step = Step(knob.name, ordinal, tuple(sorted(variant.items())))
                    try:
                        nxt, _ = _apply_step(current, kernel_name, step, guesses)
                    except NotApplicable:
                        continue
                    if nxt in seen:
                        continue
                    seen.add(nxt)
                    custom = getattr(knob, "title_for", None)
                    title = custom(site, dict(variant)) if custom is not None else site.title
                    setting = Setting(
                        (*steps, step),
                        nxt,
                        (*(parts.titles if parts else ()), title),
                        tuple(dict.fromkeys([*(parts.relieves if parts else ()), *site.relieves])),
                        parts.line if parts else site.line,
                    )
                    found.append(setting)
                    extend(nxt, setting, knob_index)

    extend(text, None, 0)
    return found


class Tune(Rewrite):
    """The tuner as a rewrite: each legal setting is a site whose change is the whole setting.
    Not in the catalogue's list (its sites are what the planner turns to once the catalogue has
    nothing new), but known to it by name, so the executor applies its plans."""

    name = "tune"
    prior = 0.5
    summary = "set the loop order, tile size, tiles per block and buffer counts together"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        return [_site_of(setting) for setting in settings(view.source, view.kernel_name)]

    def site_named(self, source: str, kernel_name: str, site_id: str) -> Site | None:
        """Any legal setting, enumerated or not (the planner may widen the neighbourhood)."""
        try:
            return _site_of(realise(source, kernel_name, site_id))
        except NotApplicable:
            return None

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        setting: Setting = site.payload
        return setting.text

    def apply(self, source: str, kernel_name: str, site_id: str, params: Params | None = None) -> str:
        """Any setting's text, enumerated or not: realised step by step, or refused with the
        illegal step's reason."""
        text = realise(source, kernel_name, site_id).text
        if text == source:
            raise NotApplicable(f"the setting {site_id!r} would not change the kernel")
        return text


def _site_of(setting: Setting) -> Site:
    return Site(
        Tune.name,
        setting.key(),
        setting.line,
        setting.title,
        description=(
            "Several tiling knobs set at once (each step legal for the rewrite that owns it): "
            + "; ".join(setting.titles)
            + "."
        ),
        relieves=setting.relieves,
        payload=setting,
    )

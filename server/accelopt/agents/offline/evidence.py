"""What the optimization memory says about each site of a kernel, for the offline planner.

An experience speaks about a site in proportion to two things:

- *kinship*: how much the experience's kernel is like this one. Full for the same kernel family
  (which includes the search's own earlier iterations); otherwise half from the roofline bound
  (a lesson learned on a DMA-bound kernel is about DMA-bound kernels) and half from the overlap
  of the NKI instructions the two kernels use (matmul-with-norm kernels learn from each other,
  whatever their tensors are called). Raw token overlap, which mostly measures shared variable
  names, is not used.
- *match*: whether the lesson is about this kind of site: same rewrite, and how close the site's
  structural pattern (site_pattern.py) is to the one the lesson was learned on. When this kernel
  is the lesson's own result (the search's previous step), the lines that change wrote are not a
  "next site" of it: the lesson does not speak for re-applying its rewrite to its own output
  (blocking the loop that blocking just created). Only that lesson: a line counts as written even
  when the change merely renamed something on it, too coarse a test to silence other lessons.
  Conversely, a lesson of the same family whose change rewrote the very line of the site (the
  same code, met again in a sibling or a descendant of the kernel it was learned on) weighs
  SAME_SITE times more than one from a site that merely looks alike.
- *size*: for a move that keeps a block resident in SBUF (a preload), whether the lesson's block
  and the site's are in the same size class at the shapes each kernel is timed at (sizes.py):
  a preload that spilled on a 2 MB-per-partition block is no evidence against preloading a 16 KB
  one, nor is one that paid on a small block evidence for a block that cannot fit. Across the
  capacity a lesson counts SIZE_ACROSS_CAPACITY (nothing); between the two classes that fit, one
  that paid counts fully and one that did not SIZE_MISMATCH (crowding SBUF is what differs there,
  a reason to lose, not to gain: size_match); one without a size (an older lesson, an LLM's, an
  unknown shape) counts fully, as before.
- *reads saved*: a paid lesson about such a move expects a site to gain in proportion to the share
  of its kernel's HBM reads the move removes, up to the lesson's own share (reads_scale).

Two readings come out:

- a per-site *gain*: the relevance-weighted mean log-speedup of matching lessons (negative lessons
  pull it down), damped when the evidence is thin;
- *deferred* rewrites: the memory keeps the pairs that paid off (and the clear failures). For
  each success on a kernel like this one, the rewrites of the catalogue that could have acted
  on that kernel were the contenders; a rewrite that was a contender on several similar kernels
  and never the one that paid is unlikely to pay here, and one with net negative evidence should
  be tried after the rest. "Several": its wins are compared with what an even split of each
  success among its contenders would give it, both with one pseudo-success added, so a thin
  memory defers nothing -- and a rewrite that could not act on the remembered kernels (a new
  rewrite, another kind of code) is never deferred for lack of wins it had no chance to have.

With no experiences every gain is 0 and nothing is deferred: the planner then ranks exactly as it
does with the memory disabled.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

from accelopt.agents.offline.lesson_tags import failed_in_text, speaks_about, variant_in_text
from accelopt.agents.offline.rewrites.base import Site
from accelopt.agents.offline.site_pattern import SitePattern, pattern_in_text, rewrites_in
from accelopt.agents.offline.sizes import reads_in_text, share_in_text, size_class
from accelopt.search.candidate import Experience
from accelopt.search.kernel_text import api_calls, kernel_family

_REWRITE_TAG = re.compile(r"rewrite=([a-z_]+)")

# Pseudo-successes added to a rewrite's wins and to its even-split expectation.
PRIOR_WINS = 1.0
# A rewrite is deferred when its (smoothed) wins fall below this fraction of the even split.
DEFER_BELOW = 0.5
# Evidence damping: a single fully relevant lesson counts for 1 / (1 + DAMPING) of its gain.
DAMPING = 0.5
# The log-speedup a negative lesson counts for at most (a no-gain step, a failed candidate).
NO_GAIN_LOG = math.log(1 / 1.04)
# How much more a lesson of this search's family weighs at the very code it was measured on (the
# site's line is one the lesson's change rewrote) than at a site that merely looks alike: blocking
# a loop paid on the baseline, but blocking the block loop that produced failed on the child, and
# the child's children have that block loop, not the baseline's.
SAME_SITE = 4.0
# How much a lesson of this search's family that went nothing or worse weighs at a site that merely
# looks like the one it was measured on (same rewrite and pattern, other code): preloading k_t
# giving nothing says little about preloading v, the next operand of the same kind -- in the
# NKIBench runs that was where the gain was. A paid lesson keeps its full weight at look-alikes
# (the same kind of move paying again is what the memory is for).
LOOKALIKE_NEGATIVE = 1 / SAME_SITE
# A site whose evidence is below this is not proposed at all while other sites remain: a failure
# at a site like it on a kernel of this family (about -0.09) or a clear slowdown measured at the
# very same code; not a single no-gain step (about -0.03), not a loosely related failure.
AVOID_BELOW = -0.05
# How much a lesson says about a site whose resident block is in another size class (sizes.py):
# both fit, one with room to spare and one crowding SBUF (half for a lesson that did not pay, full
# for one that paid: size_match); one fits and the other spills (nothing: another regime -- and
# even a twentieth of a 2.7x slowdown put a fitting preload below AVOID_BELOW, out of the proposals).
SIZE_MISMATCH = 0.5
SIZE_ACROSS_CAPACITY = 0.0


def rewrite_of(experience: Experience) -> str | None:
    """The rewrite an experience's lesson applied (the summarizer tags it `rewrite=<name>`)."""
    match = _REWRITE_TAG.search(experience.lesson.plan) or _REWRITE_TAG.search(experience.lesson.title)
    return match.group(1) if match else None


@dataclass(frozen=True)
class LessonFacts:
    """What the planner reads from one experience."""

    id: int | None
    rewrite: str
    pattern: SitePattern | None
    log_speedup: float
    kinship: float
    # The rewrites that could have acted on the lesson's kernel (the contenders for its success).
    contenders: frozenset[str] = frozenset()
    # When this kernel is the lesson's own result: the lines the lesson's change wrote. A site on
    # them is the change itself (re-blocking the loop just blocked), not a next site of it.
    written_lines: frozenset[int] = frozenset()
    # The parameter variant the lesson measured (None: untagged) and whether it was rejected.
    variant: dict[str, str] | None = None
    failed: bool = False
    # For a lesson of the same kernel family: the source lines (stripped) its change removed or
    # rewrote. A site on such a line is the very code the lesson measured the rewrite on.
    removed: frozenset[str] = frozenset()
    same_family: bool = False
    # The share of a partition's SBUF the lesson's resident block took at its timed size (None:
    # not a resident move, or not known).
    sbuf_share: float | None = None
    # The share of its kernel's HBM reads the move removed (None: not known).
    reads_share: float | None = None


@dataclass
class Evidence:
    gains: dict[str, float] = field(default_factory=dict)  # site id -> damped mean log-speedup
    lesson_ids: dict[str, list[int]] = field(default_factory=dict)  # site id -> supporting lessons
    deferred: set[str] = field(default_factory=set)  # rewrite names

    def gain(self, site: Site) -> float:
        return self.gains.get(site.id, 0.0)

    def advises_against(self, site: Site) -> bool:
        """Clear evidence that the site fails or slows the kernel down (see AVOID_BELOW)."""
        return self.gain(site) < AVOID_BELOW


def kinship(experience: Experience, family: str, bound: str | None, calls: frozenset[str]) -> float:
    if experience.kernel_family and experience.kernel_family == family:
        return 1.0
    if experience.bound and bound:
        same_bound = 1.0 if experience.bound == bound else 0.0
    else:
        same_bound = 0.5  # unknown on either side: neither for nor against
    theirs = api_calls(experience.slow_kernel)
    overlap = len(calls & theirs) / len(calls | theirs) if calls or theirs else 1.0
    return 0.5 * same_bound + 0.5 * overlap


def acted_on_line(site: Site) -> int:
    """The line of the code a site's move acts on: for a loop site (`<rewrite>:<loop line>`), the
    loop's header, even when the site is anchored at another line (blocking a loop is anchored at
    the operand load its accumulators will share). Blocking i1 renames i1 in the lhs load that
    blocking i0 is anchored at; the i0 loop itself is untouched, and blocking it is not the i1
    change again, nor the very code that change was measured on."""
    _, _, where = site.id.partition(":")
    return int(where) if where.isdigit() else site.line


def match(lesson: LessonFacts, site: Site, pattern: SitePattern | None) -> float:
    if lesson.rewrite != site.rewrite or acted_on_line(site) in lesson.written_lines:
        return 0.0
    if (
        lesson.log_speedup <= 0
        and lesson.variant is not None
        and not speaks_about(lesson.variant, lesson.failed, site.variants[0] if site.variants else {})
    ):
        # A variant that failed or gave nothing says nothing against the site's first choice
        # (the executor leaves that variant out, variants.py): a block of 4 breaking the shapes
        # is no reason not to block by 2.
        return 0.0
    return pattern_match(lesson.pattern, pattern)


def pattern_match(theirs: SitePattern | None, mine: SitePattern | None) -> float:
    """How close a lesson's site pattern is to this site's."""
    if theirs is None or mine is None:
        return 0.6  # a lesson with no pattern (an LLM's, an older row): the rewrite alone
    return theirs.match(mine)


def read_lessons(
    kernel_name: str, kernel_text: str, bound: str | None, experiences: list[Experience]
) -> list[LessonFacts]:
    family = kernel_family(kernel_name)
    calls = api_calls(kernel_text)
    facts = []
    for exp in experiences:
        name = rewrite_of(exp)
        if name is None or exp.speedup <= 0:
            continue
        facts.append(
            LessonFacts(
                id=exp.id,
                rewrite=name,
                pattern=pattern_in_text(exp.lesson.plan),
                log_speedup=_log_speedup(exp),
                kinship=kinship(exp, family, bound, calls),
                contenders=(rewrites_in(exp.slow_kernel) | {name}) if exp.speedup > 1 else frozenset(),
                written_lines=written_lines(exp.slow_kernel, kernel_text)
                if exp.fast_kernel == kernel_text
                else frozenset(),
                variant=variant_in_text(exp.lesson.plan),
                failed=failed_in_text(exp.lesson.plan),
                removed=removed_lines(exp.slow_kernel, exp.fast_kernel)
                if exp.kernel_family and exp.kernel_family == family
                else frozenset(),
                same_family=bool(exp.kernel_family) and exp.kernel_family == family,
                sbuf_share=share_in_text(exp.lesson.plan),
                reads_share=reads_in_text(exp.lesson.plan),
            )
        )
    return facts


def _log_speedup(experience: Experience) -> float:
    """A negative lesson never counts as a gain: a step of 1.00-1.04x recorded as a no-gain
    lesson cost an evaluation for nothing, so it weighs at least like a NO_GAIN slowdown."""
    value = math.log(experience.speedup)
    return value if experience.positive else min(value, NO_GAIN_LOG)


def written_lines(before: str, after: str) -> frozenset[int]:
    """1-based lines of `after` that the change from `before` inserted or rewrote."""
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    lines: set[int] = set()
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            lines.update(range(j1 + 1, j2 + 1))
    return frozenset(lines)


def removed_lines(before: str, after: str) -> frozenset[str]:
    """The stripped source lines of `before` that `after` no longer has."""
    kept = {line.strip() for line in after.splitlines()}
    return frozenset(s for line in before.splitlines() if (s := line.strip()) and s not in kept)


def size_match(theirs: float | None, mine: float | None, paid: bool = False) -> float:
    """How much a lesson's resident block says about a site's, by their size classes. Across
    the capacity (one fits, the other spills): nothing. Between the two classes that fit, a
    lesson that paid counts fully: what a preload saves is the reloads it removes, whatever
    share of SBUF the block takes while it fits, and the preload of w that fits in 0.73 of a
    partition is the same bet as one of a 0.05 block (counted half, matmul_add_rmsnorm's small
    x_t preload came before its 1.87x w preload on the strength of other kernels' small
    blocks). What differs between them is crowding the rest of SBUF, a reason for a preload to
    lose: a lesson that gave nothing or worse counts SIZE_MISMATCH there."""
    if theirs is None or mine is None:
        return 1.0
    a, b = size_class(theirs), size_class(mine)
    if a == b:
        return 1.0
    if "exceeds" in (a, b):
        return SIZE_ACROSS_CAPACITY
    return 1.0 if paid else SIZE_MISMATCH


def reads_scale(theirs: float | None, mine: float | None) -> float:
    """How much of a paid lesson's log-speedup a site can expect by the reads each move removes
    (sizes.reads_share): the lesson's gain came from removing its share of its kernel's reads, so a
    site that removes a smaller share is expected to gain in proportion -- lora's small `a` block
    (2% of its reads) is not the 1.8x preload of an operand that made up most of bmm's. A site that
    removes as much or more keeps the lesson's full gain (no extrapolation beyond what was
    measured); either share unknown: the full gain, as before."""
    if theirs is None or mine is None or theirs <= 0:
        return 1.0
    return min(mine / theirs, 1.0)


def weigh(
    lessons: list[LessonFacts],
    sites: list[Site],
    patterns: dict[str, SitePattern],
    kernel_text: str = "",
    shares: dict[str, float] | None = None,
    reads: dict[str, float] | None = None,
) -> Evidence:
    """`shares`: site id -> the share of SBUF the site's resident block takes at this kernel's
    timed size (sizes.py); a site not in it has no size fact. `reads`: site id -> the share of
    this kernel's HBM reads the site's move removes (sizes.reads_share)."""
    evidence = Evidence()
    if not lessons:
        return evidence
    lines = kernel_text.splitlines()
    for site in sites:
        pattern = patterns.get(site.id)
        line = acted_on_line(site)
        code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        total = weighted = 0.0
        ids: list[int] = []
        for lesson in lessons:
            relevance = lesson.kinship * match(lesson, site, pattern)
            relevance *= size_match(lesson.sbuf_share, (shares or {}).get(site.id), lesson.log_speedup > 0)
            if relevance <= 0:
                continue
            if code and code in lesson.removed:
                relevance *= SAME_SITE
            elif lesson.same_family and lesson.log_speedup <= 0:
                relevance *= LOOKALIKE_NEGATIVE
            log_speedup = lesson.log_speedup
            if log_speedup > 0:
                log_speedup *= reads_scale(lesson.reads_share, (reads or {}).get(site.id))
            total += relevance
            weighted += relevance * log_speedup
            if lesson.id is not None and lesson.log_speedup > 0:
                ids.append(lesson.id)
        if total > 0:
            evidence.gains[site.id] = weighted / (total + DAMPING)
            evidence.lesson_ids[site.id] = ids
    evidence.deferred = _deferred(lessons, sites, evidence)
    return evidence


def _deferred(lessons: list[LessonFacts], sites: list[Site], evidence: Evidence) -> set[str]:
    rewrites = sorted({s.rewrite for s in sites})
    wins: dict[str, float] = defaultdict(float)
    even_split: dict[str, float] = defaultdict(float)
    for lesson in lessons:
        if lesson.log_speedup <= 0:
            continue
        wins[lesson.rewrite] += lesson.kinship
        for name in lesson.contenders:
            even_split[name] += lesson.kinship / len(lesson.contenders)
    deferred = set()
    for name in rewrites:
        ratio = (wins[name] + PRIOR_WINS) / (even_split[name] + PRIOR_WINS)
        best = max(evidence.gain(s) for s in sites if s.rewrite == name)
        if ratio < DEFER_BELOW or best < 0:
            deferred.add(name)
    if len(deferred) == len(rewrites):
        return set()  # nothing to prefer: keep the profile's order
    return deferred

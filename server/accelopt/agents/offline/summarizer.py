"""The offline summarizer: a lesson from what actually changed between the slow and the fast
kernel (a unified-diff excerpt) and the speedup measured for it.

The lesson's text starts with machine-readable tags, `rewrite=<name>` and, when the site can be
found in the slow kernel, `pattern=<key>`: the structural fingerprint of the code the rewrite
acted on (site_pattern.py), which is what lets the lesson steer a differently named kernel with
the same shape of code; for a move that keeps a block resident in SBUF, `sbuf=<share>`: how much
of a partition's SBUF the block took at the size the kernel is timed at, and `reads=<share>`: how
much of the kernel's measured HBM reads the reloads it removed made up (sizes.py). Then
`variant=<params>` when the plan had parameters (`factor:4`), and
`result=failed` when the candidate was rejected: what lets the executor leave out, on a similar
site, the variant that failed or gave nothing (variants.py)."""

from __future__ import annotations

import asyncio
import difflib

from accelopt.agents.offline.catalogue import all_sites, get_rewrite
from accelopt.agents.offline.lesson_tags import variant_tag
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.site_pattern import pattern_of_site
from accelopt.agents.offline.sizes import reads_share, reads_tag, sbuf_share, share_tag
from accelopt.profiling.profile import Profile
from accelopt.search.candidate import Lesson
from accelopt.search.roles import SummarizeRequest, SummarizeResult
from accelopt.search.speedup_words import speedup_words

SNIPPET_LINES = 12


def changed_lines(slow: str, fast: str) -> tuple[str, str]:
    """The removed and the added lines of the change (at most SNIPPET_LINES each)."""
    before: list[str] = []
    after: list[str] = []
    for line in difflib.unified_diff(slow.splitlines(), fast.splitlines(), lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        if line.startswith("-"):
            before.append(line[1:])
        elif line.startswith("+"):
            after.append(line[1:])
    return "\n".join(before[:SNIPPET_LINES]), "\n".join(after[:SNIPPET_LINES])


def _profile_delta(slow: Profile | None, fast: Profile | None) -> str:
    if slow is None or fast is None:
        return ""
    parts = [f"latency {slow.latency_ms:.4g} ms -> {fast.latency_ms:.4g} ms ({slow.label})"]
    for label, field in (
        ("Vector Engine busy", "vector_engine_active_time_percent"),
        ("Scalar Engine busy", "scalar_engine_active_time_percent"),
        ("Tensor Engine busy", "tensor_engine_active_time_percent"),
        ("DMA busy", "dma_active_time_percent"),
    ):
        a, b = getattr(slow, field), getattr(fast, field)
        if abs(a - b) >= 0.05:
            parts.append(f"{label} {a:.0%} -> {b:.0%}")
    if slow.hbm_read_bytes != fast.hbm_read_bytes:
        parts.append(f"HBM reads {slow.hbm_read_bytes:,} -> {fast.hbm_read_bytes:,} bytes")
    return "; ".join(parts)


def _sizes_of_site(request: SummarizeRequest) -> tuple[float | None, float | None]:
    """The share of SBUF the plan's resident block took at the slow kernel's timed size, and the
    share of the slow kernel's HBM reads the move removed (sizes.py)."""
    site = next(
        (s for s in all_sites(request.slow.text, request.slow.name) if s.id == request.plan.site), None
    )
    if site is None or site.rewrite != request.plan.rewrite:
        return None, None
    profile = request.slow_profile
    hardware = profile.hardware if profile is not None else "trn1"
    share = sbuf_share(
        request.slow.text, request.slow.name, site, request.input_shapes, hardware, request.input_dtypes
    )
    reads = reads_share(
        request.slow.text,
        request.slow.name,
        site,
        request.input_shapes,
        hardware,
        profile.hbm_read_bytes if profile is not None else 0,
        request.input_dtypes,
    )
    return share, reads


class OfflineSummarizer:
    async def summarize(self, request: SummarizeRequest) -> SummarizeResult:
        plan = request.plan
        before, after = changed_lines(request.slow.text, request.fast.text)
        if not before and not after:
            return SummarizeResult(error="the two kernels are identical: nothing to learn")
        positive = request.failure is None and request.speedup > 1.0
        if request.failure is not None:
            verdict = f"failed, {request.failure.splitlines()[0][:120]}"
        else:
            verdict = speedup_words(request.speedup)
        try:
            what = get_rewrite(plan.rewrite).summary if plan.rewrite else plan.title
        except NotApplicable:
            what = plan.title
        delta = _profile_delta(request.slow_profile, request.fast_profile)
        tags = f"rewrite={plan.rewrite or 'unknown'}"
        if plan.rewrite:
            # Finding the site again means analysing the slow kernel: CPU work, off the event loop.
            pattern = await asyncio.to_thread(
                pattern_of_site, request.slow.text, request.slow.name, plan.rewrite, plan.site
            )
            if pattern is not None:
                tags += f" pattern={pattern.key}"
            share, reads = await asyncio.to_thread(_sizes_of_site, request)
            if share is not None:
                tags += f" {share_tag(share)}"
            if reads is not None:
                tags += f" {reads_tag(reads)}"
        if plan.params:
            tags += f" variant={variant_tag(plan.params)}"
        if request.failure is not None:
            tags += " result=failed"
        text = f"{tags}: {what}. Applied as: {plan.title}. Result: {verdict}" + (
            f" ({delta})." if delta else "."
        )
        if not positive:
            text += " Avoid this change on similar kernels."
        lesson = Lesson(
            title=f"{plan.title} ({verdict})",
            plan=text,
            before=before,
            after=after,
            positive=positive,
        )
        return SummarizeResult(lesson=lesson)

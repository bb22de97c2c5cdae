"""Experiences as the search stores them, for the memory tests: the real offline summarizer's
lesson on an actual rewrite of a kernel, marked positive by the search's own rule."""

from __future__ import annotations

from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.agents.offline.rewrites.base import Params, Site
from accelopt.agents.offline.summarizer import OfflineSummarizer
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Experience, Plan
from accelopt.search.config import SearchConfig
from accelopt.search.kernel_text import kernel_family
from accelopt.search.roles import SummarizeRequest

POSITIVE_ABOVE = SearchConfig().positive_threshold


async def summarized_experience(
    kernel: KernelSource,
    site: Site,
    params: Params,
    speedup: float,
    *,
    id_: int,
    failure: str | None = None,
    bound: str = "",
    input_shapes: dict[str, list[int]] | None = None,
) -> Experience:
    """The lesson the summarizer writes for `site` rewritten with `params` (rejected when
    `failure` is given), stored as the search would store it."""
    plan = Plan(title=site.title, rewrite=site.rewrite, site=site.id, params=dict(params))
    fast = get_rewrite(site.rewrite).apply(kernel.text, kernel.name, site.id, plan.params)
    result = await OfflineSummarizer().summarize(
        SummarizeRequest(
            slow=kernel,
            fast=kernel.model_copy(update={"text": fast}),
            plan=plan,
            speedup=speedup,
            failure=failure,
            input_shapes=input_shapes or {},
        )
    )
    assert result.lesson is not None
    positive = failure is None and speedup > POSITIVE_ABOVE
    return Experience(
        id=id_,
        slow_kernel=kernel.text,
        fast_kernel=fast,
        speedup=speedup,
        lesson=result.lesson.model_copy(update={"positive": positive}),
        kernel_family=kernel_family(kernel.name),
        bound=bound,
    )

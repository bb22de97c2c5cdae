"""The tuner: random settings of loop order, tile size, tiles per block and buffer counts on test kernels in
both styles. Every setting it calls legal gives a kernel the emulator runs to the numpy
reference; every other one is refused with a reason that names the step at fault."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.tuner import KNOBS, Step, realise, setting_key
from accelopt.agents.offline.tuner import settings as tuner_settings

from .helpers import CASES, assert_matches_reference

# Kernels with tiling loops of the three knobs: a matmul in each style (blocking, interchange),
# an elementwise kernel in each style (widening, interchange), a directly allocated kernel in
# each style (buffer counts; some counts would overlap another tensor and must be refused).
TUNED = ["cg_matmul", "hw_matmul_bias", "hw_silu", "cg_silu", "hw_direct", "cg_direct"]

KNOB_RANK = {k.name: i for i, k in enumerate(KNOBS)}
FACTORS = [(("factor", 2),), (("factor", 2),), (("factor", 4),), (("factor", 3),), ()]
NO_PARAMS = [(), (), (), (("factor", 2),)]
COUNTS = [(("count", 2),), (("count", 4),), (("count", 8),), (("count", 1),), ()]


def _step(rewrite: str) -> st.SearchStrategy[Step]:
    # Mostly parameters of the kind the knob takes, sometimes not (then the knob must refuse).
    params = {"loop_interchange": NO_PARAMS, "buffer_count": COUNTS}.get(rewrite, FACTORS)
    return st.builds(
        Step, rewrite=st.just(rewrite), ordinal=st.sampled_from([0, 0, 0, 1, 2]), params=st.sampled_from(params)
    )


steps = st.sampled_from([*KNOB_RANK, *KNOB_RANK, "hoist_everything"]).flatmap(_step)
# Mostly in knob order (the order a setting must have), sometimes not.
step_lists = st.tuples(st.lists(steps, min_size=1, max_size=3), st.integers(0, 3)).map(
    lambda drawn: drawn[0] if drawn[1] == 0 else sorted(drawn[0], key=lambda s: KNOB_RANK.get(s.rewrite, 9))
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(case=st.sampled_from(TUNED), chosen=step_lists)
def test_a_random_setting_is_legal_and_computes_the_reference_or_is_refused_with_a_reason(
    case: str, chosen: list[Step]
) -> None:
    source = CASES[case]
    key = setting_key(tuple(chosen))
    try:
        setting = realise(source.text, source.name, key)
    except NotApplicable as exc:
        assert exc.reason.strip(), f"{key} refused without a reason"
        event("refused")
        return
    event("legal")
    assert setting.text != source.text or not chosen
    assert_matches_reference(source, setting.text)


@pytest.mark.parametrize("case", ["cg_matmul", "cg_silu", "hw_matmul_bias"])
def test_every_enumerated_setting_is_realised_as_enumerated_and_computes_the_reference(case: str) -> None:
    source = CASES[case]
    found = tuner_settings(source.text, source.name, limit=12)
    assert len(found) >= 3, [s.key() for s in found]
    assert len({s.text for s in found}) == len(found), "two settings gave the same kernel"
    assert any(len(s.steps) >= 2 for s in found), "no setting turns more than one knob"
    tune = get_rewrite("tune")
    for setting in found:
        assert tune.apply(source.text, source.name, setting.key()) == setting.text
        assert_matches_reference(source, setting.text)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("block_accumulators#0:factor=3", "factor=3 is not legal here"),
        ("block_accumulators#5:factor=2", "not a site #5"),
        ("hoist_everything#0", "not a tuning knob"),
        ("block_accumulators#0:factor=2;loop_interchange#0", "out of order"),
        ("block_accumulators:factor=2", "is not REWRITE#ORDINAL"),
    ],
)
def test_an_illegal_setting_is_refused_with_the_reason(key: str, words: str) -> None:
    source = CASES["cg_matmul"]
    with pytest.raises(NotApplicable, match=words):
        realise(source.text, source.name, key)


def test_a_refused_step_says_what_its_rewrite_refuses() -> None:
    """hw_silu's loops are plain `range`: interchanging them is refused by the rewrite itself,
    and the tuner passes the rewrite's reason on."""
    source = CASES["hw_silu"]
    with pytest.raises(NotApplicable, match="its iteration order may matter"):
        realise(source.text, source.name, "loop_interchange#0")

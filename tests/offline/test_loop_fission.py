"""Loop fission on our own kernels in both styles: a loop whose body does two independent pieces
of work is split where (and only where) no data flows between the parts, and the split kernel
computes the numpy reference."""

from __future__ import annotations

import pytest

from accelopt.agents.offline.catalogue import get_rewrite

from .helpers import CASES, assert_matches_reference

FISSION = get_rewrite("loop_fission")


@pytest.mark.parametrize("name", ["hw_two_outputs", "cg_two_outputs"])
def test_a_loop_of_two_independent_parts_is_split_once_and_stays_correct(name: str) -> None:
    case = CASES[name]
    (site,) = FISSION.sites(case.text, case.name)  # the only split with no data across it
    split = FISSION.apply(case.text, case.name, site.id)
    assert split.count("affine_range") == 2
    assert_matches_reference(case, split)


@pytest.mark.parametrize("name", ["hw_silu", "cg_silu", "hw_two_pass"])
def test_a_body_whose_statements_feed_each_other_is_not_split(name: str) -> None:
    case = CASES[name]
    assert FISSION.sites(case.text, case.name) == []

"""The dataflow rewrites: an elementwise chain is recognised by what it computes, in any spelling
(nl.* functions, nisa.* instructions, Python operators), in both kernel styles and both NKI
generations, and fused; pinned work moves between engines where the ISA allows it. Every
rewritten kernel is run in the emulator against the numpy reference."""

from __future__ import annotations

import pytest

from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.agents.offline.dataflow import chains_in
from accelopt.agents.offline.kernel_ir import view_of
from accelopt.agents.offline.planner import choose_params
from accelopt.agents.offline.terms import agree, apply, const, leaf, normalise
from accelopt.profiling.profile import Profile

from .helpers import CASES, assert_matches_reference

X = leaf("x", "tile")


def squash(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize(
    "spelling",
    [
        apply("multiply", X, apply("sigmoid", X)),
        apply("divide", X, apply("add", const(1.0), apply("exp", apply("negative", X)))),
        apply("multiply", apply("reciprocal", apply("add", apply("exp", apply("multiply", X, const(-1.0))), const(1.0))), X),
        apply("divide", X, apply("add", apply("exp", apply("subtract", const(0.0), X)), const(1.0))),
    ],
    ids=["x*sigmoid(x)", "x/(1+exp(-x))", "recip(exp(x*-1)+1)*x", "x/(exp(0-x)+1)"],
)
def test_every_spelling_of_silu_normalises_to_silu(spelling):
    assert normalise(spelling) == apply("silu", X)
    assert agree(spelling, apply("silu", X)).same


def test_forms_that_differ_do_not_agree():
    assert not agree(apply("multiply", X, apply("sigmoid", X)), apply("sigmoid", X)).same
    assert normalise(apply("multiply", X, apply("sigmoid", apply("multiply", X, const(2.0))))) != apply("silu", X)


# (case, words in the site title, text that must appear, text that must vanish)
FUSIONS = [
    (
        "cg_silu_chain",
        "4-instruction chain at lines 21-33 into one silu activation",
        ["v7[i0,nl.arange(128)[:,None],nl.arange(1024)[None,:]]=nisa.activation(op=nl.silu,data=v3[i0,"],
        ["nisa.reciprocal", "np.add", "v4=nl.ndarray", "v6="],
    ),
    (
        "hw_silu_div",
        "6-instruction chain at lines 13-15 into silu activation + scalar tensor tensor",
        ["nisa.activation(op=nl.silu,data=t)", "op0=np.multiply,operand0=-0.5,op1=np.add", "importnumpyasnp"],
        ["nl.exp(-t)", "t/(1.0+e)"],
    ),
    (
        "nki07_swish_gate",
        "5-instruction chain at lines 21-29 into silu activation + tensor tensor",
        ["nisa.activation(dst=e,op=nl.silu,data=a)", "nisa.tensor_tensor(dst=z,data1=e,data2=b,op=nl.multiply)"],
        ["nisa.reciprocal", "op0=nl.add", "d=nl.ndarray", "neuronxcc"],
    ),
    ("cg_silu", "2-instruction chain at lines 19-25 into one silu activation", ["op=nl.silu", "mask="], ["v4="]),
    ("cg_axpy", "into one scalar tensor tensor", ["nisa.scalar_tensor_tensor(", "operand0=-2.0"], ["v6=", "np.subtract"]),
    ("hw_matmul_bias", "into one exp activation", ["nisa.activation(op=nl.exp,data=acc,bias=b,scale=0.5)"], []),
    ("hw_softplus", "into one softplus activation", ["op=nl.softplus"], ["nl.log"]),
]


@pytest.mark.parametrize("case,title,present,absent", FUSIONS, ids=[f[0] for f in FUSIONS])
def test_a_chain_fuses_by_what_it_computes_and_keeps_numerics(case, title, present, absent):
    source = CASES[case]
    rewrite = get_rewrite("fuse_elementwise_chain")
    sites = [s for s in rewrite.sites(source.text, source.name) if title in s.title]
    assert sites, [s.title for s in rewrite.sites(source.text, source.name)]
    new = rewrite.apply(source.text, source.name, sites[0].id)
    for text in present:
        assert squash(text) in squash(new), text
    for text in absent:
        assert squash(text) not in squash(new), text
    assert_matches_reference(source, new)


def test_a_chain_ends_where_an_intermediate_is_used_again():
    text = CASES["hw_silu_div"].text.replace("value=s - u * 0.5)", "value=s - u * 0.5 + e)")
    rewrite = get_rewrite("fuse_elementwise_chain")
    view = view_of(text, "silu_div_kernel")
    longest = max(chains_in(view), key=lambda c: c.instructions)
    assert "exp" not in str(longest.term)  # `e` is read twice: a leaf, not inlined
    assert all("silu" not in s.title for s in rewrite.sites(text, "silu_div_kernel"))


def test_a_chain_is_not_fused_across_a_write_to_what_it_reads():
    text = CASES["hw_silu_div"].text.replace(
        "        e = nl.exp(-t)\n", "        e = nl.exp(-t)\n        t = nl.load(y[i * 128 : (i + 1) * 128, :])\n"
    )
    sites = get_rewrite("fuse_elementwise_chain").sites(text, "silu_div_kernel")
    assert all("silu" not in s.title for s in sites)
    # Two levels down: the write sits between the intermediate and the root, after the read.
    text = CASES["hw_silu_div"].text.replace(
        "        s = t / (1.0 + e)\n",
        "        d = 1.0 + e\n        t = nl.load(y[i * 128 : (i + 1) * 128, :])\n        s = t / d\n",
    )
    sites = get_rewrite("fuse_elementwise_chain").sites(text, "silu_div_kernel")
    assert sites and all("silu" not in s.title for s in sites)


# (case, words in the site title, params, text that must appear)
MOVES = [
    ("cg_silu_chain", "tensor_tensor at line 33 from the Vector Engine", {"engine": "gpsimd"}, ["engine=nisa.gpsimd_engine,"]),
    ("nki07_swish_gate", "tensor_tensor at line 29", {"engine": "gpsimd"}, ["op=nl.multiply,engine=nisa.engine.gpsimd)"]),
    (
        "hw_scale_recip",
        "scale-and-shift activation at line 14",
        {"engine": "vector"},
        ["nisa.tensor_scalar(data=t,op0=np.multiply,operand0=3.0,op1=np.add,operand1=col,engine=nisa.vector_engine)"],
    ),
    ("hw_scale_recip", "reciprocal at line 15", {"engine": "scalar"}, ["engine=nisa.scalar_engine"]),
]


@pytest.mark.parametrize("case,title,params,present", MOVES, ids=[f"{m[0]}-{m[2]['engine']}" for m in MOVES])
def test_pinned_work_moves_to_another_legal_engine_and_keeps_numerics(case, title, params, present):
    source = CASES[case]
    rewrite = get_rewrite("rebalance_engines")
    sites = [s for s in rewrite.sites(source.text, source.name) if title in s.title]
    assert sites and params in sites[0].variants
    new = rewrite.apply(source.text, source.name, sites[0].id, params)
    for text in present:
        assert squash(text) in squash(new), text
    assert_matches_reference(source, new)


def test_rebalancing_follows_the_busy_shares_and_never_sends_psum_to_gpsimd():
    source = CASES["hw_scale_recip"]
    site = next(s for s in get_rewrite("rebalance_engines").sites(source.text, source.name) if "activation" in s.title)
    busy_vector = Profile(
        backend="simulator",
        hardware="trn1",
        latency_ms=1.0,
        bound="vector",
        vector_engine_active_time_percent=0.9,
        scalar_engine_active_time_percent=0.95,
        gpsimd_engine_active_time_percent=0.0,
    )
    assert choose_params(site, busy_vector) == {"engine": "gpsimd"}
    assert site.relieves == ("scalar",)
    matmul = CASES["cg_matmul"]
    refusals = get_rewrite("rebalance_engines").refusals(matmul.text, matmul.name)
    for site in get_rewrite("rebalance_engines").sites(matmul.text, matmul.name):
        assert {"engine": "gpsimd"} not in site.variants or "PSUM" not in site.description
    assert all("PSUM" in r.reason for r in refusals)


def test_offline_optimize_speeds_up_silu_written_as_a_chain_in_the_compiler_generated_style(tmp_path):
    """End to end through the CLI, simulator backend: the catalogue sees the SiLU behind
    exp -> add -> reciprocal -> multiply and the product measures the fused kernel faster."""
    from accelopt.cli import main
    from accelopt.search.events import Finished, search_event_adapter

    source = CASES["cg_silu_chain"]
    kernel_file = tmp_path / source.file
    kernel_file.write_text(source.text)
    out = tmp_path / "out"
    argv = ["optimize", str(kernel_file), "--agents", "offline", "--no-memory", "--out", str(out)]
    argv += ["-T", "1", "-B", "1", "-N", "2", "-K", "1", "--seeds", "2", "--fix-attempts", "0"]
    assert main(argv) == 0
    events = [search_event_adapter.validate_json(line) for line in (out / "events.jsonl").read_text().splitlines()]
    finished = events[-1]
    assert isinstance(finished, Finished)
    best = finished.ranked[0].candidate
    assert best.plan is not None and best.plan.rewrite == "fuse_elementwise_chain"
    assert best.speedup is not None and best.speedup > 1.2
    assert "nl.silu" in (out / "best.py").read_text()

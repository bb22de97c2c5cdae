"""The catalogue of rewrites the offline agents choose from, by name."""

from __future__ import annotations

from accelopt.agents.offline.kernel_ir import view_of
from accelopt.agents.offline.rewrites.accumulate_in_psum import AccumulateInPsum
from accelopt.agents.offline.rewrites.affine_range import AffineRange
from accelopt.agents.offline.rewrites.assign_engine import AssignEngine
from accelopt.agents.offline.rewrites.base import Params, Rewrite, Site
from accelopt.agents.offline.rewrites.block_accumulators import BlockAccumulators
from accelopt.agents.offline.rewrites.buffer_count import BufferCount
from accelopt.agents.offline.rewrites.compose import Compose
from accelopt.agents.offline.rewrites.double_buffer_load import DoubleBufferLoad
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.rewrites.fill_psum_bank import FillPsumBank
from accelopt.agents.offline.rewrites.fold_activation import FoldActivation
from accelopt.agents.offline.rewrites.fold_loop import FoldLoop
from accelopt.agents.offline.rewrites.fuse_activation_reduce import FuseActivationReduce
from accelopt.agents.offline.rewrites.fuse_chain import FuseChain
from accelopt.agents.offline.rewrites.fuse_scalar_tensor_tensor import FuseScalarTensorTensor
from accelopt.agents.offline.rewrites.fuse_silu import FuseSilu
from accelopt.agents.offline.rewrites.fuse_tensor_scalar import FuseTensorScalar
from accelopt.agents.offline.rewrites.hoist_invariant import HoistInvariant
from accelopt.agents.offline.rewrites.loop_fission import LoopFission
from accelopt.agents.offline.rewrites.loop_fusion import LoopFusion
from accelopt.agents.offline.rewrites.loop_interchange import LoopInterchange
from accelopt.agents.offline.rewrites.preload_operand import PreloadOperand
from accelopt.agents.offline.rewrites.rebalance_engines import RebalanceEngines
from accelopt.agents.offline.rewrites.remove_copy import RemoveCopy
from accelopt.agents.offline.rewrites.reuse_transpose import ReuseTranspose
from accelopt.agents.offline.rewrites.sink_to_first_use import SinkToFirstUse
from accelopt.agents.offline.rewrites.transpose_on_dma import TransposeOnDma
from accelopt.agents.offline.rewrites.transpose_on_tensor_engine import TransposeOnTensorEngine
from accelopt.agents.offline.rewrites.widen_free_dim import WidenFreeDim
from accelopt.agents.offline.tuner import Tune

REWRITES: tuple[Rewrite, ...] = (
    HoistInvariant(),
    PreloadOperand(),
    AffineRange(),
    LoopInterchange(),
    WidenFreeDim(),
    BlockAccumulators(),
    FoldLoop(),
    FuseChain(),
    FuseSilu(),
    FoldActivation(),
    FuseActivationReduce(),
    FuseTensorScalar(),
    FuseScalarTensorTensor(),
    RemoveCopy(),
    ReuseTranspose(),
    AssignEngine(),
    RebalanceEngines(),
    DoubleBufferLoad(),
    AccumulateInPsum(),
    TransposeOnDma(),
    TransposeOnTensorEngine(),
    FillPsumBank(),
    LoopFusion(),
    LoopFission(),
    SinkToFirstUse(),
    BufferCount(),
)
# The tuner is known by name (the executor applies its plans) but is not in the list: the planner
# turns to its settings once the list's plans give nothing new (planner.py).
TUNER = Tune()
_BY_NAME = {r.name: r for r in (*REWRITES, TUNER)}
# Compositions of the rewrites above (and the tuner), for when both have nothing new (planner.py).
COMPOSE = Compose(lambda name: get_rewrite(name))
_BY_NAME[COMPOSE.name] = COMPOSE


def get_rewrite(name: str | None) -> Rewrite:
    if name is None or name not in _BY_NAME:
        known = ", ".join(sorted(_BY_NAME))
        raise NotApplicable(f"unknown rewrite {name!r} (the catalogue has: {known})")
    return _BY_NAME[name]


def all_sites(source: str, kernel_name: str) -> list[Site]:
    """Every legal site of every rewrite, in catalogue order."""
    try:
        view = view_of(source, kernel_name)
    except NotApplicable:
        return []
    found: list[Site] = []
    for rewrite in REWRITES:
        found.extend(rewrite.sites_in(view))
    return found


def title_for(site: Site, params: Params) -> str:
    rewrite = _BY_NAME[site.rewrite]
    custom = getattr(rewrite, "title_for", None)
    return custom(site, params) if custom is not None else site.title

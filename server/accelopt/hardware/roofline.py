"""Roofline maths with AccelOpt's convention (NKI_NOTES §6).

`peak_latency` turns a work description into the fastest a kernel could possibly run on one
NeuronCore and names the resource that bounds it; `work_from_trace` derives that description
from any kernel's instruction trace, so every kernel gets a percent of peak even without a
task-supplied formula.
"""

from __future__ import annotations

import itertools
from typing import Literal

from accelopt.hardware.specs import HardwareSpec
from accelopt.hardware.work import Work
from accelopt.nki.trace import Memory, Trace

RooflineBound = Literal["vector", "tensor", "hbm"]


def _terms(work: Work, hw: HardwareSpec) -> tuple[float, float, float]:
    """The convention's vector, tensor and HBM seconds for `work` on `hw`."""
    full_rate = min(work.matmul_flops_full_rate, work.matmul_flops)
    # Low-precision matmul FLOPs run at the fp32 peak times the fp32 slowdown factor
    # (*inferred*, keeping the §6 fp32 figure as the reference: 4 x 23.75e12 on Trainium1).
    tensor = (work.matmul_flops - full_rate) / hw.roofline_matmul_flops + full_rate / (
        hw.roofline_matmul_flops * hw.fp32_matmul_factor
    )
    return work.vector_flops / hw.roofline_vector_flops, tensor, work.hbm_bytes / hw.roofline_hbm_bytes_per_s


def peak_latency(work: Work, hw: HardwareSpec) -> tuple[float, RooflineBound]:
    """Seconds the work needs at peak on `hw`, and which term dominates (ties: first listed)."""
    vector, tensor, hbm = _terms(work, hw)
    terms: dict[RooflineBound, float] = {"vector": vector, "tensor": tensor, "hbm": hbm}
    bound = max(terms, key=lambda k: terms[k])
    return terms[bound], bound


# The most arithmetic one element costs an ALU instruction: `nki.isa.activation` computes
# func(data * scale + bias) and can accumulate the results along the free axis in the same pass
# (`nki.isa.activation_reduce`), four operations at one element per lane per cycle (NKI ISA
# reference; NKI_NOTES §4: "activation + reduction max(64, N) + 64").
MAX_OPS_PER_ELEMENT_CYCLE = 4


def physical_floor(work: Work, hw: HardwareSpec) -> float:
    """Seconds below which no kernel can do `work` on `hw`, whatever AccelOpt's convention says.

    The §6 roofline is a convention: its vector peak counts two engines at the Vector Engine's
    clock, one operation per element. Real instructions fuse several operations per element
    (an exp with a bias and a running sum is three of a softmax's five), and the Scalar Engine
    runs faster than the Vector Engine (NKI_NOTES §3: 1.4 vs 1.12 GHz on Trainium1), so a
    well-fused vector-bound kernel can legitimately run above 100% of that peak. The floor
    credits every ALU engine at its own clock (the Vector Engine with its performance mode)
    with `MAX_OPS_PER_ELEMENT_CYCLE` operations per element; the Tensor Engine and HBM terms
    are the convention's, which no honest kernel beats (the tensor term already runs bf16
    FLOPs at the full rate, and the convention's HBM rate is above the core's share)."""
    lanes = hw.partitions
    element_rate = lanes * (
        hw.vector_clock_hz * hw.vector_perf_mode_copy_speedup + hw.scalar_clock_hz + hw.gpsimd_clock_hz
    )
    _, tensor, hbm = _terms(work, hw)
    return max(work.vector_flops / (element_rate * MAX_OPS_PER_ELEMENT_CYCLE), tensor, hbm)


def _box_elements(box: tuple[tuple[int, int], ...]) -> int:
    n = 1
    for start, stop in box:
        n *= max(0, stop - start)
    return n


def _union_elements(boxes: list[tuple[tuple[int, int], ...]]) -> int:
    """Elements covered by a union of boxes, without double-counting overlaps.

    Coordinate compression along the first axis, recursing on the rest: exact, and cheap for
    the tile-aligned boxes kernels produce (a few distinct edges per axis).
    """
    if not boxes:
        return 0
    if len(boxes) == 1 or len(boxes[0]) == 0:
        return _box_elements(boxes[0])
    edges = sorted({e for box in boxes for e in box[0]})
    total = 0
    for lo, hi in itertools.pairwise(edges):
        inside = [box[1:] for box in boxes if box[0][0] <= lo and hi <= box[0][1]]
        if inside:
            total += (hi - lo) * _union_elements(_dedupe(inside))
    return total


def _dedupe(boxes: list[tuple[tuple[int, int], ...]]) -> list[tuple[tuple[int, int], ...]]:
    return list(dict.fromkeys(boxes))


def _note_access(
    direct: dict[tuple[str, int], list[tuple[tuple[int, int], ...]]],
    indirect_bytes: dict[tuple[str, int], int],
    key: tuple[str, int],
    box: tuple[tuple[int, int], ...],
    indirect: bool,
    moved: int,
) -> None:
    if indirect:
        indirect_bytes[key] = indirect_bytes.get(key, 0) + moved
    else:
        direct.setdefault(key, []).append(box)


def compute_flops(trace: Trace) -> tuple[float, float, float]:
    """(matmul FLOPs, the part of them at the full bf16/fp16/fp8/tf32 rate, vector FLOPs) of a
    trace, counted as `work_from_trace` counts them."""
    matmul = 0.0
    full_rate = 0.0
    vector = 0.0
    for rec in trace.records:
        if rec.matmul_kmn is not None and not rec.is_transpose and rec.opcode != "broadcast":
            k, m, n = rec.matmul_kmn
            matmul += 2.0 * k * m * n
            if dtype_bytes(rec.dtype) < 4 or rec.dtype in ("tfloat32", "tf32"):
                full_rate += 2.0 * k * m * n
        vector += rec.vector_ops
    return matmul, full_rate, vector


def work_from_trace(trace: Trace) -> Work:
    """The roofline work a kernel's trace implies (AccelOpt's conventions, NKI_NOTES §6).

    - matmul FLOPs: 2·K·M·N of every Tensor Engine matmul, transposes and partition broadcasts
      excluded, not doubled for fp32 (the roofline's fp32 peak already is the ¼ rate); those
      with bf16/fp16/fp8/tf32 operands are also counted in `matmul_flops_full_rate`;
    - vector FLOPs: the elementwise operations the emulator counted (`vector_ops`);
    - HBM bytes: the unique bytes of kernel inputs read plus kernel outputs written, each byte
      once however often it is re-read, at the tensors' own dtype sizes.
    """
    matmul, full_rate, vector = compute_flops(trace)
    read_boxes: dict[int, list[tuple[tuple[int, int], ...]]] = {}
    write_boxes: dict[int, list[tuple[tuple[int, int], ...]]] = {}
    # an indirect DMA's region is the whole indexed dimension (the rows are data): its tensor
    # counts at most the bytes such DMAs moved on top of the direct accesses' union
    direct: dict[tuple[str, int], list[tuple[tuple[int, int], ...]]] = {}
    indirect_bytes: dict[tuple[str, int], int] = {}
    for rec in trace.records:
        indirect = bool(rec.extra.get("indirect"))
        if rec.src_memory is Memory.HBM:
            for region in rec.reads:
                info = trace.tensors.get(region.tensor_id)
                if info is not None and info.memory is Memory.HBM and info.is_input:
                    read_boxes.setdefault(region.tensor_id, []).append(region.box)
                    _note_access(
                        direct, indirect_bytes, ("r", region.tensor_id), region.box, indirect, rec.bytes
                    )
        if rec.dst_memory is Memory.HBM:
            for region in rec.writes:
                info = trace.tensors.get(region.tensor_id)
                if info is not None and info.memory is Memory.HBM and info.is_output:
                    write_boxes.setdefault(region.tensor_id, []).append(region.box)
                    _note_access(
                        direct, indirect_bytes, ("w", region.tensor_id), region.box, indirect, rec.bytes
                    )
    hbm = 0.0
    for kind, boxes_by_tensor in (("r", read_boxes), ("w", write_boxes)):
        for tensor_id, boxes in boxes_by_tensor.items():
            itemsize = dtype_bytes(trace.tensors[tensor_id].dtype)
            touched = itemsize * _union_elements(_dedupe(boxes))
            moved = indirect_bytes.get((kind, tensor_id))
            if moved is not None:
                plain = direct.get((kind, tensor_id), [])
                touched = min(touched, itemsize * _union_elements(_dedupe(plain)) + moved)
            hbm += touched
    return Work(
        matmul_flops=matmul,
        vector_flops=vector,
        hbm_bytes=hbm,
        source="trace",
        matmul_flops_full_rate=full_rate,
    )


_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "tfloat32": 4,
    "int32": 4,
    "uint32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "bf16": 2,
    "int16": 2,
    "uint16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3": 1,
    "float8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e8m0fnu": 1,
    # OCP MX 4-packed types of NeuronCore-v4: four FP8 in 32 bits, four FP4 in 16 bits
    "float8_e5m2_x4": 4,
    "float8_e4m3fn_x4": 4,
    "float4_e2m1fn_x4": 2,
    "float4_e2m1fn": 1,
    "float64": 8,
    "int64": 8,
}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name as the trace spells it (4 when unknown)."""
    name = dtype.lower().removeprefix("np.").removeprefix("numpy.")
    if name in _DTYPE_BYTES:
        return _DTYPE_BYTES[name]
    if "8" in name and "float8" in name:
        return 1
    return 4

"""Size facts: how much of a partition's SBUF a move keeps resident, at the size the kernel is
timed at.

The same rewrite pays or loses by size. Preloading an operand's block before the loop that
reloaded it removes the reloads while the block fits in SBUF; at the published NKIBench shapes a
block of w for lora or matmul (5120 x 12288 fp32: about 2 MB per partition) is over ten times a
partition's capacity, the compiler spills it, and the kernel runs 2.4-2.8x slower -- while on bmm
(one batch's 64 x 4096 block, 16 KB per partition) the same move pays 1.8-1.9x. A site's pattern
(site_pattern.py) cannot tell the two apart; its *share* of SBUF can: the resident bytes per
partition (Resident, computed from the kernel's own expressions with the timed input shapes)
over what the target hardware gives a kernel per partition.

Shares are coarse-grained into classes for matching lessons to sites: a lesson measured on a
block that spilled says little about a block that fits, and the reverse.

A second fact says how much such a move can save: the share of the kernel's HBM reads the reloads
it removes make up (`reads_share`). Preloading the block of an operand out of a loop of T trips
removes T - 1 of its T reads in every pass of the loops around that one; over the kernel's measured
HBM reads (the profile at the timed size) that is the share of the read traffic the move takes
away. A preload of w that removed 80% of bmm's reads and paid 1.8x says little about preloading
lora's small `a` block, which removes 2% of lora's: the reads a move saves, not its rewrite's
name, are what a preload lesson is evidence of.
"""

from __future__ import annotations

import re

import libcst as cst

from accelopt.agents.offline.kernel_ir import KernelView, view_of
from accelopt.agents.offline.rewrites.base import Resident, Site
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.hardware.specs import get_hardware

# Bytes per element by the dtype's name. An input's dtype is not in the source (`w.dtype`): it
# comes from the evaluation (Evaluation.timed_input_dtypes, from the timed trace); an unknown one
# counts as 4 bytes (fp32, an upper bound for the 16- and 8-bit types).
_ELEMENT_BYTES = {
    "float32": 4,
    "int32": 4,
    "uint32": 4,
    "tfloat32": 4,
    "bfloat16": 2,
    "float16": 2,
    "int16": 2,
    "uint16": 2,
    "float8": 1,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
DEFAULT_ELEMENT_BYTES = 4
# Class bounds on the share of a partition's SBUF: up to a quarter the block leaves room for
# everything else; up to the whole the block fits but crowds the rest; beyond it, it spills.
SMALL_SHARE = 0.25
FULL_SHARE = 1.0
_SHARE_TAG = re.compile(r"\bsbuf=(\d+(?:\.\d+)?)")
_READS_TAG = re.compile(r"\breads=(\d+(?:\.\d+)?(?:e-?\d+)?)")


def size_class(share: float) -> str:
    if share <= SMALL_SHARE:
        return "small"
    return "large" if share <= FULL_SHARE else "exceeds"


def share_tag(share: float) -> str:
    """`sbuf=0.36`: the lesson's block took 36% of a partition's SBUF (no spaces: one tag)."""
    return f"sbuf={share:.3g}"


def share_in_text(text: str) -> float | None:
    match = _SHARE_TAG.search(text)
    return float(match.group(1)) if match else None


def shape_constants(view: KernelView, shapes: dict[str, list[int]]) -> dict[str, int]:
    """The kernel's integer names at the timed shapes: its literal constants, plus the names it
    binds from its inputs' shapes (`k, m = x_t.shape`, `n = w.shape[1]`) and what it derives
    from those (`tiles = n // 512`)."""
    env = dict(view.constants)
    if not shapes:
        return env
    for _ in range(3):  # names derived from names bound later in the walk
        for stmt in view.simple_statements():
            if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
                continue
            assign = stmt.body[0]
            if len(assign.targets) != 1:
                continue
            target, value = assign.targets[0].target, assign.value
            dims = _shape_of(value, shapes)
            if isinstance(target, cst.Tuple) and dims is not None:
                names = [e.value.value for e in target.elements if isinstance(e.value, cst.Name)]
                if len(names) == len(target.elements) == len(dims):
                    env.update(dict(zip(names, dims, strict=True)))
            elif isinstance(target, cst.Name):
                known = _dim_of(value, shapes)
                if known is None:
                    known = view.eval_int(value, env)
                if known is not None:
                    env.setdefault(target.value, known)
    return env


def resident_bytes(
    view: KernelView, resident: Resident, shapes: dict[str, list[int]], dtypes: dict[str, str] | None = None
) -> int | None:
    """Bytes per partition the block takes at the timed shapes (None: a factor is not known);
    `dtypes`: the inputs' element types, for a block of `x.dtype`."""
    env = shape_constants(view, shapes)
    total = element_bytes(resident.dtype, dtypes)
    for factor in resident.factors:
        value = view.eval_int(factor, env)
        if value is None or value <= 0:
            return None
        total *= value
    return total


def sbuf_share(
    text: str,
    kernel_name: str,
    site: Site,
    shapes: dict[str, list[int]],
    hardware: str,
    dtypes: dict[str, str] | None = None,
) -> float | None:
    """The site's resident block over the SBUF bytes a partition gives a kernel on `hardware`;
    None for a site that keeps nothing resident or whose size is not known."""
    if site.resident is None or not shapes:
        return None
    try:
        view = view_of(text, kernel_name)
        capacity = get_hardware(hardware).sbuf_bytes_per_partition
    except (NotApplicable, KeyError, ValueError):
        return None
    with view.lock:
        held = resident_bytes(view, site.resident, shapes, dtypes)
    return None if held is None else held / capacity


def reads_tag(share: float) -> str:
    """`reads=0.42`: the move removed reloads worth 42% of the kernel's HBM reads (one tag)."""
    return f"reads={share:.3g}"


def reads_in_text(text: str) -> float | None:
    match = _READS_TAG.search(text)
    return float(match.group(1)) if match else None


def reads_share(
    text: str,
    kernel_name: str,
    site: Site,
    shapes: dict[str, list[int]],
    hardware: str,
    hbm_read_bytes: int,
    dtypes: dict[str, str] | None = None,
) -> float | None:
    """The share of the kernel's HBM reads (`hbm_read_bytes`, measured at the timed size) that a
    move keeping a block resident across a loop (`<rewrite>:<load>:<loop line>`) removes: the
    block (its bytes per partition over every partition) times the loop's trips less one, times
    the trips of the loops around it. At most 1; None when a factor is not known."""
    if site.resident is None or not shapes or hbm_read_bytes <= 0:
        return None
    where = site.id.rsplit(":", 1)[-1]
    if not where.isdigit():
        return None
    try:
        view = view_of(text, kernel_name)
        partitions = get_hardware(hardware).partitions
    except (NotApplicable, KeyError, ValueError):
        return None
    with view.lock:
        loop = next((lp for lp in view.loops if lp.line == int(where)), None)
        held = resident_bytes(view, site.resident, shapes, dtypes)
        if loop is None or held is None:
            return None
        env = shape_constants(view, shapes)
        passes = 1
        outer = loop.parent
        while outer is not None:
            trips = view.eval_int(outer.trip_expr, env) if outer.trip_expr is not None else None
            if trips is None or trips <= 0:
                return None
            passes *= trips
            outer = outer.parent
        trips = view.eval_int(loop.trip_expr, env) if loop.trip_expr is not None else None
    if trips is None or trips <= 0:
        return None
    removed = held * partitions * (trips - 1) * passes
    return min(removed / hbm_read_bytes, 1.0)


def element_bytes(dtype: str, inputs: dict[str, str] | None = None) -> int:
    """Bytes per element of a dtype as the source writes it: `np.float32`, `nl.bfloat16`, or
    `w.dtype` for an input w, whose type `inputs` gives (name -> dtype) when it is known."""
    text = dtype.strip()
    owner, _, attribute = text.rpartition(".")
    if attribute == "dtype" and inputs and owner in inputs:
        text = inputs[owner]
    name = text.rsplit(".", 1)[-1].strip().strip("'\"")
    for key in sorted(_ELEMENT_BYTES, key=len, reverse=True):
        if name.startswith(key):
            return _ELEMENT_BYTES[key]
    return DEFAULT_ELEMENT_BYTES


def _shape_of(value: cst.BaseExpression, shapes: dict[str, list[int]]) -> list[int] | None:
    """`t.shape` for an input t."""
    if isinstance(value, cst.Attribute) and value.attr.value == "shape" and isinstance(value.value, cst.Name):
        return shapes.get(value.value.value)
    return None


def _dim_of(value: cst.BaseExpression, shapes: dict[str, list[int]]) -> int | None:
    """`t.shape[i]` for an input t."""
    if not isinstance(value, cst.Subscript) or len(value.slice) != 1:
        return None
    dims = _shape_of(value.value, shapes)
    index = value.slice[0].slice
    if dims is None or not isinstance(index, cst.Index) or not isinstance(index.value, cst.Integer):
        return None
    position = int(index.value.value)
    return dims[position] if -len(dims) <= position < len(dims) else None

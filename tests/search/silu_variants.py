"""Small SiLU kernels for search tests: a slow baseline and the variants scripted agents "write".

The input is [256, 512] fp32. The baseline walks it in 128 x 128 tiles (8 tiles, 16 DMAs);
the wide variant uses 128 x 512 tiles (2 tiles, 4 DMAs), the medium one 128 x 256. Which is
faster, and by how much, is whatever the simulator measures.
"""

from __future__ import annotations

HEADER = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n"


def silu(
    cols_per_tile: int, *, name: str = "silu_kernel", directive: bool = False, body: str | None = None
) -> str:
    compute = body or "result = nl.multiply(tile, nl.sigmoid(tile))"
    return (
        HEADER
        + ("# accelopt: inputs x=float32[256,512]\n" if directive else "")
        + "@nki.jit\n"
        + f"def {name}(x):\n"
        + "    rows, cols = x.shape\n"
        + "    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)\n"
        + "    for i in nl.affine_range(rows // 128):\n"
        + f"        for j in nl.affine_range(cols // {cols_per_tile}):\n"
        + f"            tile = nl.load(x[i * 128 : (i + 1) * 128, j * {cols_per_tile} : (j + 1) * {cols_per_tile}])\n"
        + f"            {compute}\n"
        + f"            nl.store(out[i * 128 : (i + 1) * 128, j * {cols_per_tile} : (j + 1) * {cols_per_tile}], value=result)\n"
        + "    return out\n"
    )


BASELINE = silu(128, directive=True)
WIDE = silu(512)  # correct and faster
MEDIUM = silu(256)  # correct, between the two
WRONG = silu(512, body="result = nl.sigmoid(tile)")  # runs, but computes sigmoid, not SiLU

# 256 rows in one tile: more partitions than the hardware has.
TOO_TALL = (
    HEADER
    + "@nki.jit\n"
    + "def silu_kernel(x):\n"
    + "    rows, cols = x.shape\n"
    + "    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)\n"
    + "    tile = nl.load(x[0:256, 0:512])\n"
    + "    result = nl.multiply(tile, nl.sigmoid(tile))\n"
    + "    nl.store(out[0:256, 0:512], value=result)\n"
    + "    return out\n"
)
TOO_TALL_LINE = 9

"""What a kernel's source text says about it without running it: its family (from its name),
its identifier tokens and the NKI instructions it calls. The memory ranks experiences by these;
the offline agents read them to match lessons and rewrites to kernels."""

from __future__ import annotations

import re


def kernel_family(name: str) -> str:
    """'silu_kernel_v3' -> 'silu': what kernels of one family share in their names."""
    base = re.sub(r"(_v\d+|_opt\w*|_\d+)$", "", name.lower())
    base = re.sub(r"(^nki_|_nki$|_kernel$|^kernel_)", "", base)
    return base or name.lower()


_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# An NKI API call under its usual aliases (nl., nisa., nki.language., nki.isa.).
_API_CALL = re.compile(r"\b(?:nl|nisa|language|isa)\.([A-Za-z_]\w*)\s*\(")
# Loop ranges and index helpers say nothing about what a kernel computes; the nl and nisa
# spellings of one instruction are the same instruction.
_NOT_WORK = {"affine_range", "sequential_range", "static_range", "range", "arange", "par_dim", "ds"}
_SAME_INSTRUCTION = {"nc_matmul": "matmul", "nc_transpose": "transpose"}


def source_tokens(text: str) -> set[str]:
    return set(_TOKEN.findall(text))


def instruction_name(api_name: str) -> str | None:
    """'nc_matmul' -> 'matmul'; None for loop ranges and index helpers (not work)."""
    leaf = api_name.rsplit(".", 1)[-1]
    return None if leaf in _NOT_WORK else _SAME_INSTRUCTION.get(leaf, leaf)


def api_calls(text: str) -> frozenset[str]:
    """The NKI instructions a kernel uses: what kind of kernel it is, whatever its names."""
    return frozenset(n for n in map(instruction_name, _API_CALL.findall(text)) if n is not None)

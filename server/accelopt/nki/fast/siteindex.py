"""Indexing a tensor from a kernel statement seen before: a small function compiled per form.

A kernel statement such as ``w[128 * i1 + nl.arange(128)[:, None], 512 * i2 + nl.arange(512)[None, :]]``
or ``x[r0 : r0 + 128, c0 : c0 + 512]`` runs once per loop iteration with the same *form* (the
kinds of the index parts, the grids' sizes and coefficients, the slices' extents) and new
offsets. The first time a call site meets a form, the general parser (`tensor.make_view`) builds
the view and this module compiles a straight-line function for the form: it checks that a key
has exactly that form (anything else: None, and the general parser runs) and builds the view
from the key's offsets with the view's shape, terms and box deltas as constants. The compiled
view is identical to what the general parser builds; only the work per call shrinks.

Only in-bounds forms are compiled for slices (out-of-range slices are errors the general parser
reports); grids may reach outside the tensor (a masked tail), which marks the view as the
general parser does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelopt.nki.fast.codecache import define
from accelopt.nki.indexing import IndexExpr
from accelopt.nki.loopvar import LoopVar

Builder = Callable[[Any, Any], Any]

# (id of the kernel code, instruction offset) -> compiled forms (Tensor.__getitem__ reads it)
SITE_FORMS: dict[tuple[int, int], list[Builder]] = {}
_MAX_FORMS_PER_SITE = 4
_MAXSITE_FORMS = 20_000  # compiled forms of kernels loaded earlier in this process are dropped past this


def learn(tensor: Any, key: Any, view: Any, site: tuple[int, int]) -> None:
    """Compile the form of `key` (which the general parser turned into `view`) for `site`."""
    builders = SITE_FORMS.get(site)
    if builders is None:
        if len(SITE_FORMS) >= _MAXSITE_FORMS:
            SITE_FORMS.clear()
        builders = SITE_FORMS[site] = []
    if len(builders) >= _MAX_FORMS_PER_SITE:
        return
    build = _compile(tensor, key, view)
    if build is None or build(tensor, key) is None:
        build = _no_form  # keeps the site from compiling the same unsupported form every call
    builders.append(build)


def _no_form(tensor: Any, key: Any) -> None:
    return None


def _compile(tensor: Any, key: Any, view: Any) -> Builder | None:
    if key.__class__ is not tuple or view._arrays is not None:
        return None
    shape = tensor.shape
    n = len(key)
    if n > len(shape):
        return None
    kinds = set()
    for k in key:
        cls = k.__class__
        if cls is IndexExpr:
            if k.values is not None:
                return None
            kinds.add("grid")
        elif cls is slice:
            kinds.add("slice")
        elif cls is int or cls is LoopVar:
            continue
        else:
            return None
    if kinds == {"grid"}:
        return _compile_grids(shape, key, view)
    if kinds == {"slice"} and n == len(shape):
        return _compile_slices(shape, key, view)
    return None


def _plus(name: str, delta: int) -> str:
    return name if delta == 0 else f"{name} + {delta}"


def _int_check(name: str) -> str:
    return f"({name}.__class__ is int or {name}.__class__ is LoopVar)"


def _compile_grids(shape: tuple[int, ...], key: tuple[Any, ...], view: Any) -> Builder | None:
    n = len(key)
    consts: dict[str, Any] = {"IndexExpr": IndexExpr, "LoopVar": LoopVar, "View": type(view)}
    names = [f"k{d}" for d in range(n)]
    lines = [
        "def build(tensor, key):",
        f"    if key.__class__ is not tuple or len(key) != {n} or (tensor.shape is not SHAPE and tensor.shape != SHAPE):",
        "        return None",
        f"    {', '.join(names)}{',' if n == 1 else ''} = key",
    ]
    consts["SHAPE"] = shape
    box_parts = []
    oob_parts = []
    for d, k in enumerate(key):
        lo, hi = view._box()[d]
        off = view._offsets[d]
        dlo, dhi = lo - off, hi - off
        if k.__class__ is IndexExpr:
            consts[f"S{d}"], consts[f"C{d}"] = k.sizes, k.coefs
            # grids of one form share their sizes/coefs tuples: `is` settles most checks; an
            # affine grid with a non-zero coefficient cannot be a materialised one
            values_check = "" if any(k.coefs) else f" or k{d}.values is not None"
            # grids are immutable and `nl.arange(n)[:, None]` hands out one object: the grid
            # met when learning (held here, so its identity stays unique) needs no checks
            consts[f"E{d}"] = k
            lines.append(f"    if k{d} is not E{d}:")
            lines.append(
                f"        if k{d}.__class__ is not IndexExpr or (k{d}.sizes is not S{d} and k{d}.sizes != S{d}) "
                f"or (k{d}.coefs is not C{d} and k{d}.coefs != C{d}){values_check}:"
            )
            lines.append("            return None")
            lines.append(f"    o{d} = k{d}.offset")
        else:
            lines.append(f"    if not {_int_check(f'k{d}')}:")
            lines.append("        return None")
            lines.append(f"    o{d} = k{d} + 0 if k{d} >= 0 else k{d} + {shape[d]}")
        box_parts.append(f"({_plus(f'o{d}', dlo)}, {_plus(f'o{d}', dhi)})")
        if dhi > dlo:  # in bounds: 0 <= o + dlo and o + dhi <= size
            oob_parts.append(f"not {-dlo} <= o{d} <= {shape[d] - dhi}")
    trailing_offsets = view._offsets[n:]
    trailing_box = view._box()[n:]
    consts["VSHAPE"], consts["TERMS"] = view.shape, view._terms
    offsets = ", ".join([f"o{d}" for d in range(n)] + [str(o) for o in trailing_offsets])
    box = ", ".join(box_parts + [repr(b) for b in trailing_box])
    _new_view(lines, f"({offsets},)", f"({box},)", " or ".join(oob_parts) or "False")
    lines.append("    return view")
    return _define(lines, consts)


def _compile_slices(shape: tuple[int, ...], key: tuple[Any, ...], view: Any) -> Builder | None:
    """One in-bounds step-1 slice or int per dimension (what tensor._slices_view accepts)."""
    n = len(key)
    consts: dict[str, Any] = {"LoopVar": LoopVar, "View": type(view), "SHAPE": shape}
    names = [f"k{d}" for d in range(n)]
    lines = [
        "def build(tensor, key):",
        f"    if key.__class__ is not tuple or len(key) != {n} or tensor.shape != SHAPE:",
        "        return None",
        f"    {', '.join(names)}{',' if n == 1 else ''} = key",
    ]
    offsets, box = [], []
    for d, k in enumerate(key):
        size = shape[d]
        if k.__class__ is slice:
            if k.step is not None and k.step != 1:
                return None
            start_none, stop_none = k.start is None, k.stop is None
            lines.append(f"    if k{d}.__class__ is not slice:")
            lines.append("        return None")
            lines.append(f"    s{d}, e{d}, t{d} = k{d}.start, k{d}.stop, k{d}.step")
            lines.append(f"    if t{d} is not None and t{d} != 1:")
            lines.append("        return None")
            if start_none:
                lines.append(f"    if s{d} is not None:")
                lines.append("        return None")
                lines.append(f"    s{d} = 0")
            else:
                lines.append(f"    if not {_int_check(f's{d}')}:")
                lines.append("        return None")
                lines.append(f"    s{d} = s{d} + 0")
            if stop_none:
                lines.append(f"    if e{d} is not None:")
                lines.append("        return None")
                lines.append(f"    e{d} = {size}")
            else:
                lines.append(f"    if not {_int_check(f'e{d}')}:")
                lines.append("        return None")
                lines.append(f"    e{d} = e{d} + 0")
            start = 0 if start_none else int(k.start)
            stop = size if stop_none else int(k.stop)
            extent = stop - start
            # the extent is part of the form (it fixes the view's shape and terms)
            lines.append(f"    if e{d} - s{d} != {extent} or s{d} < 0 or e{d} > {size}:")
            lines.append("        return None")
            offsets.append(f"s{d}")
            box.append(f"(s{d}, e{d})")
        else:
            lines.append(f"    if not {_int_check(f'k{d}')} or not 0 <= k{d} < {size}:")
            lines.append("        return None")
            lines.append(f"    i{d} = k{d} + 0")
            offsets.append(f"i{d}")
            box.append(f"(i{d}, i{d} + 1)")
    consts["VSHAPE"], consts["TERMS"] = view.shape, view._terms
    _new_view(lines, f"({', '.join(offsets)},)", f"({', '.join(box)},)", "False")
    lines.append("    return view")
    return _define(lines, consts)


# What `View(tensor, VSHAPE, offsets, TERMS, None, box)` stores, slot by slot (the generated
# builders store them in place: the __init__ call costs more than the stores).
_VIEW_SLOTS = {
    "_tensor": "tensor",
    "_box_cache": "{box}",
    "shape": "VSHAPE",
    "_offsets": "{offsets}",
    "_terms": "TERMS",
    "_arrays": "None",
    "_np_index": "None",
    "_np_shape": "()",
    "_region_cache": "None",
    "_assigned_at": "-1",
    "_oob": "{oob}",
}


def _new_view(lines: list[str], offsets: str, box: str, oob: str) -> None:
    lines.append("    view = _new(View)")
    for name, expr in _VIEW_SLOTS.items():
        lines.append(f"    view.{name} = {expr.format(box=box, offsets=offsets, oob=oob)}")


def _define(lines: list[str], consts: dict[str, Any]) -> Builder:
    view_class = consts["View"]
    if set(view_class.__slots__) != set(_VIEW_SLOTS):
        raise TypeError("View gained or lost a slot: update siteindex._VIEW_SLOTS")
    consts["_new"] = object.__new__
    namespace = dict(consts)
    return define("\n".join(lines), "<accelopt.nki.siteindex>", namespace, "build")

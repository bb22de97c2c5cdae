"""The operators a kernel can name: ``nl.exp``, ``np.add``, ``nl.maximum`` ... passed as `op=`
arguments or called directly. Each resolves to one `OpSpec` with its fp32 numpy implementation."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from accelopt.nki.trace import Engine


@dataclass(frozen=True)
class OpSpec:
    name: str
    arity: int  # 1 (activation-style) or 2 (binary)
    fn: Callable[..., np.ndarray]
    # Binary ops that can reduce along an axis (add, max, ...)
    reduce: Callable[..., np.ndarray] | None = None
    # Needs the Scalar Engine's activation tables (exp, tanh, ...); others run anywhere.
    transcendental: bool = False
    # Moves data without arithmetic (copy/identity): no vector work counted.
    trivial: bool = False


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 evaluated in float64 (|error| < 1.5e-7).
    x64 = np.asarray(x, dtype=np.float64)
    sign = np.sign(x64)
    a = np.abs(x64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype, copy=False)


def _gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(np.float32)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    return (0.5 * x * (1.0 + np.tanh(inner))).astype(np.float32)


def _gelu_sigmoid(x: np.ndarray) -> np.ndarray:
    # the sigmoid approximation of GELU: x * sigmoid(1.702 x) (Hendrycks & Gimpel, GELU paper)
    return (x * _sigmoid(np.float32(1.702) * np.asarray(x, dtype=np.float32))).astype(np.float32)


def _gelu_sigmoid_dx(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    s = _sigmoid(np.float32(1.702) * x)
    return (s + np.float32(1.702) * x * s * (1 - s)).astype(np.float32)


def _gelu_dx(x: np.ndarray) -> np.ndarray:
    # d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
    x64 = np.asarray(x, dtype=np.float64)
    cdf = 0.5 * (1.0 + _erf(x64 / math.sqrt(2.0)).astype(np.float64))
    pdf = np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)
    return (cdf + x64 * pdf).astype(np.float32)


def _silu_dx(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    s = _sigmoid(x)
    return (s * (1 + x * (1 - s))).astype(np.float32)


def _erf_dx(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    return (2.0 / math.sqrt(math.pi) * np.exp(-x64 * x64)).astype(np.float32)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.float32(0), x).astype(np.float32)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1.0 / np.sqrt(x)).astype(x.dtype, copy=False)


def _reciprocal(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return (1.0 / x).astype(x.dtype, copy=False)


def _divide(a: Any, b: Any) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b)


def _compare(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def compare(a: Any, b: Any) -> np.ndarray:
        result = fn(a, b)
        return result.astype(np.float32) if isinstance(result, np.ndarray) else np.float32(result)

    return compare


def _logical(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def logical(a: Any, b: Any) -> np.ndarray:
        return np.asarray(fn(a != 0, b != 0), dtype=np.float32)

    return logical


def _bitwise(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def bitwise(a: Any, b: Any) -> np.ndarray:
        return fn(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64))

    return bitwise


_SPECS: dict[str, OpSpec] = {}


def _add(spec: OpSpec) -> None:
    _SPECS[spec.name] = spec


_fn: Callable[..., Any]
_reduce: Callable[..., Any] | None
for _name, _fn, _reduce in (
    ("add", np.add, np.add.reduce),
    ("subtract", np.subtract, None),
    ("multiply", np.multiply, np.multiply.reduce),
    ("divide", _divide, None),
    ("maximum", np.maximum, np.maximum.reduce),
    ("minimum", np.minimum, np.minimum.reduce),
    ("power", np.power, None),
    ("mod", np.mod, None),
    ("fmod", np.fmod, None),
):
    _add(OpSpec(_name, 2, _fn, _reduce))
for _name, _fn in (
    ("equal", np.equal),
    ("not_equal", np.not_equal),
    ("greater", np.greater),
    ("greater_equal", np.greater_equal),
    ("less", np.less),
    ("less_equal", np.less_equal),
):
    _add(OpSpec(_name, 2, _compare(_fn)))
for _name, _fn in (
    ("logical_and", np.logical_and),
    ("logical_or", np.logical_or),
    ("logical_xor", np.logical_xor),
):
    _add(OpSpec(_name, 2, _logical(_fn)))
for _name, _fn, _reduce in (
    ("bitwise_and", np.bitwise_and, np.bitwise_and.reduce),
    ("bitwise_or", np.bitwise_or, np.bitwise_or.reduce),
    ("bitwise_xor", np.bitwise_xor, np.bitwise_xor.reduce),
    ("left_shift", np.left_shift, None),
    ("right_shift", np.right_shift, None),
):
    _add(OpSpec(_name, 2, _bitwise(_fn), _reduce))

_TRANSCENDENTAL: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "gelu": _gelu,
    "gelu_apprx_tanh": _gelu_tanh,
    "gelu_apprx_sigmoid": _gelu_sigmoid,
    "gelu_apprx_sigmoid_dx": _gelu_sigmoid_dx,
    "gelu_dx": _gelu_dx,
    "silu_dx": _silu_dx,
    "erf_dx": _erf_dx,
    "silu": lambda x: x * _sigmoid(x),
    "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "erf": _erf,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "arctan": np.arctan,
    "exp2": np.exp2,
}
for _name, _fn1 in _TRANSCENDENTAL.items():
    _add(OpSpec(_name, 1, _fn1, transcendental=True))
_SIMPLE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "square": np.square,
    "abs": np.abs,
    "negative": np.negative,
    "reciprocal": _reciprocal,
    "relu": lambda x: np.maximum(x, np.float32(0)),
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "logical_not": lambda x: (x == 0).astype(np.float32),
    "invert": lambda x: np.invert(np.asarray(x).astype(np.int64)),
}
for _name, _fn1 in _SIMPLE.items():
    _add(OpSpec(_name, 1, _fn1))
_add(OpSpec("copy", 1, lambda x: x, trivial=True))

# numpy callables a kernel may pass as `op=`
_BY_OBJECT: dict[int, OpSpec] = {}
_NUMPY_NAMES: dict[Any, str] = {
    np.add: "add",
    np.subtract: "subtract",
    np.multiply: "multiply",
    np.divide: "divide",
    np.true_divide: "divide",
    np.maximum: "maximum",
    np.minimum: "minimum",
    np.fmax: "maximum",
    np.fmin: "minimum",
    np.max: "maximum",
    np.min: "minimum",
    np.amax: "maximum",
    np.amin: "minimum",
    np.sum: "add",
    np.prod: "multiply",
    np.power: "power",
    np.mod: "mod",
    np.fmod: "fmod",
    np.equal: "equal",
    np.not_equal: "not_equal",
    np.greater: "greater",
    np.greater_equal: "greater_equal",
    np.less: "less",
    np.less_equal: "less_equal",
    np.logical_and: "logical_and",
    np.logical_or: "logical_or",
    np.logical_xor: "logical_xor",
    np.logical_not: "logical_not",
    np.bitwise_and: "bitwise_and",
    np.bitwise_or: "bitwise_or",
    np.bitwise_xor: "bitwise_xor",
    np.left_shift: "left_shift",
    np.right_shift: "right_shift",
    np.invert: "invert",
    np.exp: "exp",
    np.log: "log",
    np.sqrt: "sqrt",
    np.tanh: "tanh",
    np.sin: "sin",
    np.cos: "cos",
    np.tan: "tan",
    np.arctan: "arctan",
    np.exp2: "exp2",
    np.square: "square",
    np.abs: "abs",
    np.absolute: "abs",
    np.negative: "negative",
    np.reciprocal: "reciprocal",
    np.sign: "sign",
    np.floor: "floor",
    np.ceil: "ceil",
    np.trunc: "trunc",
    np.copy: "copy",
}
for _obj, _name in _NUMPY_NAMES.items():
    _BY_OBJECT[id(_obj)] = _SPECS[_name]
_KEEP_ALIVE = list(_NUMPY_NAMES)


def register(func: Any, name: str) -> None:
    """Make a kernel-facing function (e.g. ``nl.exp``) usable as an `op=` argument."""
    _BY_OBJECT[id(func)] = _SPECS[name]
    _KEEP_ALIVE.append(func)


def alias(func: Any, original: Any) -> None:
    """Make `func` (a wrapper of `original`) usable as an `op=` argument wherever `original` is."""
    found = _BY_OBJECT.get(id(original))
    if found is not None:
        _BY_OBJECT[id(func)] = found
        _KEEP_ALIVE.append(func)


def spec(name: str) -> OpSpec:
    return _SPECS[name]


def resolve(op: Any) -> OpSpec:
    """An op argument (nl function, numpy ufunc/function, or name) → its OpSpec."""
    if isinstance(op, OpSpec):
        return op
    found = _BY_OBJECT.get(id(op))
    if found is not None:
        return found
    if isinstance(op, str) and op in _SPECS:
        return _SPECS[op]
    name = getattr(op, "__name__", None)
    if name in _SPECS:
        return _SPECS[name]
    from accelopt.nki.context import current

    raise current().error("err_unsupported_op", f"{op!r} is not an operator this emulator knows")


# The engines that can execute an elementwise instruction.
ELEMENTWISE = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)

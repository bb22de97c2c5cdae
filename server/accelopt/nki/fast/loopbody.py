"""Reading a kernel loop's body from its source: may trace-only runs synthesize its middle
iterations (fastforward.py) instead of running them?

They may when an iteration's Python does nothing but issue NKI work at offsets that move in
step with the loop variable: no Python value carried from one iteration to the next, no branch,
no call that could change Python state, every value computed from a loop variable computed
by `+`, `-`, and `*` by something that does not depend on one, and every comparison that moves
with the loop a mask on an index grid (a tail mask). The source decides most of this once per
loop; what the body's free names are bound to (modules, tiles, plain values) is checked every
time the loop starts (`Body.bindings`). The source also says whether code outside the loop
reads what its iterations bind: if not, the last iteration may be synthesized too.
"""

from __future__ import annotations

import ast
import builtins
import enum
import linecache
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelopt.nki.indexing import IndexExpr, Predicate
from accelopt.nki.python_source import parse_module
from accelopt.nki.tensor import Buffer, Tensor, View, par_dim


class _Refused(Exception):
    """The body does something a synthesized iteration could not reproduce."""


@dataclass(frozen=True)
class Body:
    """What a fast-forwardable loop body reads from outside itself."""

    # every free name the body reads (bound in the kernel's locals, globals or builtins)
    free_names: frozenset[str]
    # free names the body writes through or indexes by a loop variable: they must be tiles
    tile_names: frozenset[str]
    # free names at the root of calls that take loop-dependent arguments: they must be NKI APIs
    # (or tiles, whose methods are)
    api_names: frozenset[str]
    # groups of free names of which one must be an index grid (a moving mask compares it)
    index_groups: tuple[frozenset[str], ...] = ()
    # the body makes masks that move with the loop: fastforward.py checks iteration by iteration
    # that each keeps what it kept in the iterations compared
    moving_masks: bool = False
    # nothing outside the loop reads what its iterations bind (the loop variable, the body's
    # names): the last iteration need not run for real either
    last_unread: bool = False

    def bindings(self, frame: types.FrameType) -> list[Tensor | View] | None:
        """The tiles the body can reach through its free names, if every free name is bound
        to something a synthesized iteration cannot miss a change of (else None)."""
        local_values = frame.f_locals
        global_values = frame.f_globals
        builtin_values = global_values.get("__builtins__", builtins.__dict__)
        if isinstance(builtin_values, types.ModuleType):
            builtin_values = builtin_values.__dict__
        tiles: list[Tensor | View] = []
        for name in self.free_names:
            if name in local_values:
                value = local_values[name]
            elif name in global_values:
                value = global_values[name]
            elif name in builtin_values:
                value = builtin_values[name]
            else:
                return None  # a NameError to come: let the kernel run into it
            cls = value.__class__
            if cls is Tensor or cls is View:
                tiles.append(value)
                continue
            if name in self.tile_names:
                return None
            if name in self.api_names and not (_is_api(value) or _keeps_affine(value)):
                return None
            if not _is_plain(value):
                return None
        for group in self.index_groups:
            if not any(_bound(name, local_values, global_values).__class__ is IndexExpr for name in group):
                return None
        return tiles


def _bound(name: str, local_values: dict[str, Any], global_values: dict[str, Any]) -> Any:
    return local_values[name] if name in local_values else global_values.get(name)


_PURE_BUILTINS = frozenset(
    getattr(builtins, name)
    for name in ("abs", "bool", "float", "int", "len", "max", "min", "range", "round", "slice", "tuple")
)
_PLAIN_TYPES = (int, float, bool, str, complex, type(None), np.generic, np.dtype, IndexExpr, Predicate)
_PLAIN_CLASSES = (Buffer, par_dim, slice, range)


def _keeps_affine(value: Any) -> bool:
    """Builtins whose result moves with their arguments (`slice(i * T, (i + 1) * T)`, `int(i)`)."""
    return value is slice or value is int


def _is_emulator(value: Any) -> bool:
    module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
    return isinstance(module, str) and (module == "accelopt.nki" or module.startswith("accelopt.nki."))


def _is_api(value: Any) -> bool:
    if isinstance(value, types.ModuleType):
        return _is_emulator(value) or getattr(value, "__accelopt_emulator__", False) is True
    return callable(value) and _is_emulator(value)


def _is_plain(value: Any) -> bool:
    """A value the body can only read (or a function that cannot change Python state)."""
    if isinstance(value, _PLAIN_TYPES) or isinstance(value, _PLAIN_CLASSES):
        return True
    if isinstance(value, tuple):
        return all(_is_plain(v) for v in value)
    if isinstance(value, types.ModuleType):
        return _is_api(value) or value.__name__ in ("numpy", "math")
    if isinstance(value, type):  # numpy scalar types, the emulator's classes, int, slice, ...
        return issubclass(value, np.generic) or _is_emulator(value) or value in _PURE_BUILTINS
    if isinstance(value, np.ufunc):
        return True
    if isinstance(value, (enum.Enum, enum.EnumMeta)):
        return True  # engines and other enumerations
    try:
        return value in _PURE_BUILTINS or _is_api(value)
    except TypeError:
        return False


# --- the static reading ------------------------------------------------------------------------


@dataclass
class _Reading:
    loop_vars: set[str]
    all_assigned: set[str]
    assigned: set[str] = field(default_factory=set)
    dependent: set[str] = field(default_factory=set)
    free_names: set[str] = field(default_factory=set)
    tile_names: set[str] = field(default_factory=set)
    api_names: set[str] = field(default_factory=set)
    # masks that move with the loop: comparisons of index grids, and the names holding them
    index_groups: list[frozenset[str]] = field(default_factory=list)
    index_valued: dict[str, frozenset[str] | None] = field(default_factory=dict)
    mask_nodes: set[int] = field(default_factory=set)
    masks: set[str] = field(default_factory=set)
    # names the body binds to tiles: the free name whose call or view made it (it must be an
    # NKI API or a tile when the loop starts for the name to hold a tile)
    made: dict[str, str] = field(default_factory=dict)


_SAFE_BINOPS = (ast.Add, ast.Sub)


def _name(node: ast.Name, r: _Reading) -> bool:
    """Read a name: True if it depends on a loop variable of the body."""
    n = node.id
    if n in r.loop_vars or n in r.dependent:
        return True
    if n in r.assigned:
        return False
    if n in r.all_assigned:
        raise _Refused  # read before this iteration assigns it: carried from the last iteration
    r.free_names.add(n)
    return False


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _expr(node: ast.expr | None, r: _Reading) -> bool:
    """Check an expression; True if its value depends on a loop variable of the body."""
    if node is None or isinstance(node, ast.Constant):
        return False
    if isinstance(node, ast.Name):
        return _name(node, r)
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_") or node.attr == "random":
            raise _Refused  # private state, or a random generator's
        return _expr(node.value, r)
    if isinstance(node, ast.Subscript):
        value_dep = _expr(node.value, r)
        index_dep = _expr(node.slice, r)
        if index_dep and not value_dep:
            _must_be_tile(node.value, r)  # a Python sequence indexed by a loop variable: not affine
        return value_dep or index_dep
    if isinstance(node, ast.Slice):
        return any([_expr(node.lower, r), _expr(node.upper, r), _expr(node.step, r)])
    if isinstance(node, (ast.Tuple, ast.List)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise _Refused
        return any([_expr(e, r) for e in node.elts])
    if isinstance(node, ast.BinOp):
        left, right = _expr(node.left, r), _expr(node.right, r)
        if not (left or right):
            return False
        if isinstance(node.op, _SAFE_BINOPS) or (isinstance(node.op, ast.Mult) and not (left and right)):
            return True
        if isinstance(node.op, ast.BitAnd) and _is_mask(node.left, r) and _is_mask(node.right, r):
            r.mask_nodes.add(id(node))  # both conditions hold: still conditions on the grid
            return True
        raise _Refused  # not affine in the loop variables
    if isinstance(node, ast.UnaryOp):
        dep = _expr(node.operand, r)
        if dep and not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise _Refused
        return dep
    if isinstance(node, ast.Compare):
        if not any([_expr(node.left, r), *[_expr(c, r) for c in node.comparators]]):
            return False
        _moving_mask(node, r)
        return True
    if isinstance(node, ast.Call):
        return _call(node, r)
    raise _Refused


def _moving_mask(node: ast.Compare, r: _Reading) -> None:
    """A condition that moves with the loop (`128 * i + i_p < n`, a tail mask) is a mask on an
    index grid only if a side is one; fastforward.py then checks iteration by iteration that
    each such condition keeps what it kept in the iterations compared. A comparison of plain numbers (a
    Python bool that moves with the loop) is refused."""
    if len(node.ops) != 1 or not isinstance(
        node.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
    ):
        raise _Refused
    sides = [_index_grid(node.left, r), _index_grid(node.comparators[0], r)]
    if _CERTAIN not in sides:
        candidates = frozenset().union(*[side for side in sides if side is not None])
        if not candidates:
            raise _Refused
        r.index_groups.append(candidates)  # one of them must be an index grid when the loop starts
    r.mask_nodes.add(id(node))


_CERTAIN = frozenset({"<an index grid>"})


def _index_grid(node: ast.expr, r: _Reading) -> frozenset[str] | None:
    """For arithmetic that is an index grid if one of its names is: _CERTAIN if it is one
    (an `nl.arange` call, a name holding a grid), else the free names that could make it one;
    None for anything but such arithmetic."""
    if isinstance(node, ast.Constant):
        return frozenset()
    if isinstance(node, ast.Name):
        if node.id in r.index_valued:
            group = r.index_valued[node.id]
            return _CERTAIN if group is None else group
        if node.id in r.free_names and node.id not in r.loop_vars:
            return frozenset({node.id})
        return frozenset()
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "arange" and isinstance(func.value, ast.Name):
            r.api_names.add(func.value.id)  # nl.arange: the emulator's, so a grid
            return _CERTAIN
        return None
    if isinstance(node, ast.Subscript):
        return _index_grid(node.value, r)  # `grid[:, None]`: still a grid
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        left, right = _index_grid(node.left, r), _index_grid(node.right, r)
        if left is None or right is None:
            return None
        return _CERTAIN if _CERTAIN in (left, right) else left | right
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _index_grid(node.operand, r)
    return None


def _is_mask(node: ast.expr, r: _Reading) -> bool:
    return id(node) in r.mask_nodes or (isinstance(node, ast.Name) and node.id in r.masks)


def _must_be_tile(node: ast.expr, r: _Reading) -> None:
    """`node` is written through, indexed by a loop variable or accumulated into: it must hold a
    tile (a Python list or number would make the iteration's work depend on it in any way)."""
    if not isinstance(node, ast.Name):
        raise _Refused
    if node.id in r.free_names:
        r.tile_names.add(node.id)
    elif node.id in r.made:
        r.api_names.add(r.made[node.id])
    else:
        raise _Refused


def _maker(value: ast.expr, r: _Reading) -> str | None:
    """The free name a tile-making expression rests on: an API call (`nl.load(...)`), a view
    (`t[...]`) or a tile method (`t.broadcast_to(...)`), through any chain of them. An attribute
    read along the way (`t.shape[0:2]`) makes plain data, not a tile: None."""
    node = value
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value  # a method or module function: what it is called on
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            break
    if node is value or not isinstance(node, ast.Name):
        return None
    if node.id in r.made:
        return r.made[node.id]
    if node.id in r.free_names:
        return node.id
    return None


def _call(node: ast.Call, r: _Reading) -> bool:
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise _Refused
    root = _root(node.func)
    if not isinstance(root, ast.Name) or root.id in r.loop_vars:
        raise _Refused
    if root.id in r.dependent and root.id not in r.made:
        raise _Refused  # a method of a number that moves with the loop: anything but affine
    # Called: functions of free names (checked when the loop starts: NKI APIs, numpy, pure
    # builtins, tile methods) and methods of what this iteration made (tiles, numbers)
    func_dep = _expr(node.func, r)
    args_dep = any([_expr(a, r) for a in node.args] + [_expr(k.value, r) for k in node.keywords])
    if args_dep or func_dep:
        if root.id not in r.assigned:
            r.api_names.add(root.id)
        elif root.id in r.made:
            r.api_names.add(r.made[root.id])
    return args_dep or func_dep


def _target(node: ast.expr, value_dep: bool, r: _Reading, value: ast.expr | None = None) -> None:
    if isinstance(node, ast.Name):
        r.assigned.add(node.id)
        if value_dep:
            r.dependent.add(node.id)
        else:
            r.dependent.discard(node.id)
        r.masks.discard(node.id)
        r.index_valued.pop(node.id, None)
        maker = None if value is None else _maker(value, r)
        if maker is None:
            r.made.pop(node.id, None)
        else:
            r.made[node.id] = maker
        if value is not None and _is_mask(value, r):
            r.masks.add(node.id)
        elif value is not None and (grid := _index_grid(value, r)):
            r.index_valued[node.id] = None if grid == _CERTAIN else grid
    elif isinstance(node, ast.Subscript):
        _expr(node.slice, r)
        if isinstance(node.value, ast.Name) and node.value.id not in r.assigned:
            _name(node.value, r)
        _must_be_tile(node.value, r)
    elif isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts):
        for e in node.elts:
            _target(e, value_dep, r)
    else:
        raise _Refused


def _statements(body: list[ast.stmt], r: _Reading) -> None:
    for stmt in body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant):
                continue  # a string statement (loop-end markers)
            if not isinstance(stmt.value, ast.Call):
                raise _Refused
            _call(stmt.value, r)
        elif isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                raise _Refused
            _target(stmt.targets[0], _expr(stmt.value, r), r, stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            value_dep = _expr(stmt.value, r)
            target = stmt.target
            if isinstance(target, ast.Name) and target.id in r.assigned and target.id not in r.made:
                # a number of this iteration: `x op= v` is `x = x op v`
                operation = ast.BinOp(left=ast.Name(target.id, ast.Load()), op=stmt.op, right=stmt.value)
                _target(ast.Name(target.id, ast.Store()), _expr(operation, r), r)
            elif isinstance(target, ast.Name):
                # `acc += nc_matmul(...)`: a tile accumulates in place and stays bound to the name
                if target.id not in r.assigned:
                    _name(target, r)
                _must_be_tile(target, r)
                if value_dep and target.id in r.assigned:
                    r.dependent.add(target.id)
            else:
                _target(target, value_dep, r)
        elif isinstance(stmt, ast.For):
            if stmt.orelse or not isinstance(stmt.target, ast.Name) or not isinstance(stmt.iter, ast.Call):
                raise _Refused
            _call(stmt.iter, r)
            r.loop_vars.add(stmt.target.id)
            _statements(stmt.body, r)
        else:
            raise _Refused


def _assigned_names(body: list[ast.stmt]) -> set[str]:
    """Names the body binds to a new value (`acc += x` on a tile keeps the tile bound: not one)."""
    stores: list[ast.Name] = []
    aug_targets: set[int] = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                stores.append(node)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                aug_targets.add(id(node.target))
    return {node.id for node in stores if id(node) not in aug_targets}


def read_loop(loop: ast.For, function: ast.AST | None = None) -> Body | None:
    """The body's outside reads, if synthesized iterations could stand in for real ones
    (`function`: the function the loop is in, to see what is read outside the loop)."""
    if loop.orelse or not isinstance(loop.target, ast.Name):
        return None
    assigned = _assigned_names(loop.body)
    reading = _Reading(loop_vars={loop.target.id}, all_assigned=assigned)
    try:
        _statements(loop.body, reading)
    except _Refused:
        return None
    return Body(
        frozenset(reading.free_names),
        frozenset(reading.tile_names),
        frozenset(reading.api_names),
        tuple(reading.index_groups),
        bool(reading.mask_nodes),
        function is not None and not _read_outside(function, loop, assigned | reading.loop_vars),
    )


def _read_outside(function: ast.AST, loop: ast.For, names: set[str]) -> bool:
    """Whether code of `function` outside `loop` may read one of `names` (what the loop's last
    iteration leaves bound): anywhere, since enclosing loops come back to earlier lines."""
    inside = {id(node) for node in ast.walk(loop)}
    for node in ast.walk(function):
        if id(node) in inside:
            continue
        if isinstance(node, ast.Name) and node.id in names and not isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, ast.Name) and node.id in ("locals", "vars", "eval", "exec"):
            return True  # reads every name
        if isinstance(node, (ast.Global, ast.Nonlocal)) and names.intersection(node.names):
            return True  # code elsewhere sees the name
    return False


# --- finding the loop ---------------------------------------------------------------------------

# kernel path -> (the source lines read, {line of a `for` header: its loops and their functions},
# {line: body or None})
_Headers = dict[int, list[tuple[ast.For, ast.AST | None]]]
_BY_PATH: dict[str, tuple[list[str], _Headers, dict[int, Body | None]]] = {}
_MAX_PATHS = 500


def body_at(path: str, line: int) -> Body | None:
    """The fast-forwardable body of the loop whose `for` header is at `line` of the kernel
    source `path` (None if it is not fast-forwardable or cannot be found unambiguously)."""
    lines = linecache.getlines(path)
    known = _BY_PATH.get(path)
    if known is None or known[0] is not lines:
        if len(_BY_PATH) >= _MAX_PATHS:
            _BY_PATH.clear()
        known = _BY_PATH[path] = (lines, _headers(lines), {})
    bodies = known[2]
    if line not in bodies:  # read when the loop first runs long enough to be worth it
        loops = known[1].get(line, [])
        bodies[line] = read_loop(*loops[0]) if len(loops) == 1 else None
    return bodies[line]


def _headers(lines: list[str]) -> _Headers:
    """The `for` loops of a source (with the function each is in) by the lines of their headers."""
    try:
        tree = parse_module("".join(lines))
    except SyntaxError:
        return {}
    headers: _Headers = {}

    def visit(node: ast.AST, function: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.For):
                last = child.iter.end_lineno or child.lineno
                for line in range(child.lineno, last + 1):
                    headers.setdefault(line, []).append((child, function))
            inner = (
                child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else function
            )
            visit(child, inner)

    visit(tree, None)
    return headers

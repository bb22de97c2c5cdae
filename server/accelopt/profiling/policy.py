"""The sandbox's import and language policy, checked statically before any code runs.

Kernels are numpy + math + NKI programs: they never need dunder attributes, reflection, file or
process access, or other modules. Rejecting those constructs up front gives a clear reason and
line (`rejected`), and removes the usual ways out of a Python-level sandbox (``().__class__``,
``getattr(x, "__globals__")``, ``eval``, monkey-patching numpy or the emulator).

The same allow-lists are enforced again at run time inside the worker
(`accelopt.profiling.guard`), so code that slips past this check still meets the runtime guard.
Neither layer is a security boundary on its own: see SECURITY.md.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal

from accelopt.nki.python_source import parse_module

PolicyName = Literal["kernel", "reference"]

# Top-level modules a kernel may import. `neuronxcc` and `nki` are the NKI names the emulator
# aliases; `__future__` is a compiler directive, not a module load. The pure standard-library
# helpers are what NKI 0.7 kernels use while they are traced (tile-size classes, loops over
# `itertools.product`, cached helpers; `operator.mul` folded over a shape, `collections.deque`
# in a permutation helper): none of them reaches files, processes or the network.
KERNEL_MODULES = frozenset(
    {"numpy", "math", "neuronxcc", "nki", "__future__"}
    | {"typing", "itertools", "functools", "dataclasses", "enum", "operator", "collections"}
    # the emulator's alias of torch-neuronx holds `nki_jit` alone (the first kernels' decorator)
    | {"torch_neuronx"}
)
# A reference module is the user's own numpy code (never a model's); it may also use ml_dtypes.
REFERENCE_MODULES = KERNEL_MODULES | frozenset({"ml_dtypes"})

# Submodules of allowed packages that reach files, processes or native code.
DENIED_SUBMODULES = frozenset(
    {
        "numpy.ctypeslib",
        "numpy.f2py",
        "numpy.distutils",
        "numpy.testing",
        "numpy.lib",
    }
)
# Kernels never need random numbers; with them a kernel could regenerate its inputs from a
# seed it learnt from an earlier evaluation's message and compute the answer on the host.
KERNEL_DENIED_SUBMODULES = frozenset({"numpy.random"})
KERNEL_DENIED_ATTRIBUTES = frozenset({"random", "RandomState", "default_rng", "Generator", "SeedSequence"})

# Built-in names that give reflection, code execution, I/O or interpreter control.
DENIED_NAMES = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "open",
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "globals",
        "locals",
        "vars",
        "dir",
        "setattr",
        "delattr",
        "memoryview",
        "__import__",
        "__builtins__",
        "__loader__",
        "__spec__",
    }
)

# Attribute names that lead to modules with side effects, to frames and code objects, or to
# numpy's file/native-code helpers. (`load` is NKI's own `nl.load`, so it stays allowed; reading a
# file still meets the runtime guard.)
DENIED_ATTRIBUTES = frozenset(
    {
        # modules reachable as attributes of other modules
        "os",
        "sys",
        "subprocess",
        "builtins",
        "importlib",
        "ctypes",
        "ctypeslib",
        "socket",
        "shutil",
        "pathlib",
        "io",
        "pickle",
        "marshal",
        "gc",
        "inspect",
        "threading",
        "multiprocessing",
        "signal",
        "mmap",
        "f2py",
        "distutils",
        "testing",
        "lib",
        # frame / code / generator introspection
        "gi_frame",
        "gi_code",
        "cr_frame",
        "cr_code",
        "ag_frame",
        "ag_code",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "tb_frame",
        "tb_next",
        "co_code",
        "co_consts",
        "mro",
        # the emulator's tensor internals: on hardware a kernel cannot see input values while it
        # is traced, so reading them (to compute the answer on the host and embed it as a
        # constant) is a reward hack the emulator would otherwise allow
        "data",
        "root",
        "tid",
        "producer",
        "written",
        "fresh",
        "pmask",
        "full_region",
        "full_view",
        "view_as",
        "alloc_scopes",
        "np_shape",
        # numpy file helpers
        "save",
        "savez",
        "savez_compressed",
        "savetxt",
        "loadtxt",
        "genfromtxt",
        "fromfile",
        "tofile",
        "memmap",
        "DataSource",
    }
)

# Dunder names a reference module may read (the `if __name__ == "__main__":` idiom).
REFERENCE_DUNDER_NAMES = frozenset({"__name__"})

# Special methods a class in sandboxed code may define: construction, the container and number
# protocols, comparison, iteration and context management. Not the hooks that change how
# attributes, pickling, class creation or subclass checks work.
ALLOWED_SPECIAL_METHODS = frozenset(
    {
        "__init__", "__post_init__", "__new__", "__repr__", "__str__", "__hash__", "__bool__",
        "__len__", "__iter__", "__next__", "__contains__", "__getitem__", "__setitem__",
        "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__call__",
        "__enter__", "__exit__", "__index__", "__int__", "__float__",
        "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
        "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__neg__",
        "__pos__", "__abs__", "__pow__", "__matmul__",
    }
)  # fmt: skip
# ... and may call on `super()` (a dataclass or subclass delegating to its parent).
SUPER_METHODS = frozenset({"__init__", "__post_init__", "__new__", "__repr__", "__eq__", "__hash__"})
# Dunder methods a kernel may read off any object because calling them does only what the
# allowed syntax already does (`seq.__getitem__` is `seq[i]`, as a key function for `sorted`).
SYNTAX_DUNDERS = frozenset({"__getitem__"})


@dataclass(frozen=True)
class Violation:
    """Why a source was refused, and where (1-based line in that source)."""

    reason: str
    line: int | None


def module_allowed(module: str, policy: PolicyName, *, allow_private: bool = False) -> bool:
    """Whether `import <module>` is permitted (checked statically and again at run time).

    Source code may not name private submodules (`numpy._core`); at run time they are allowed
    (`allow_private`) because numpy's C code imports its own private modules lazily while the
    innermost Python frame is still the caller's."""
    if not module:
        return False
    allowed = KERNEL_MODULES if policy == "kernel" else REFERENCE_MODULES
    if module.split(".")[0] not in allowed:
        return False
    if not allow_private and any(part.startswith("_") for part in module.split(".")[1:]):
        return False
    denied = DENIED_SUBMODULES | (KERNEL_DENIED_SUBMODULES if policy == "kernel" else frozenset())
    return not any(module == d or module.startswith(d + ".") for d in denied)


def check_source(text: str, policy: PolicyName = "kernel") -> Violation | None:
    """The first construct in `text` the policy forbids, or None. Raises SyntaxError when the
    text does not parse (the caller reports that as a syntax error, not a policy violation)."""
    tree = parse_module(text)
    checker = _PolicyChecker(policy)
    checker.visit(tree)
    return checker.violation


class _PolicyChecker(ast.NodeVisitor):
    def __init__(self, policy: PolicyName) -> None:
        self.policy: PolicyName = policy
        self.violation: Violation | None = None
        # Names bound by imports (modules, and functions or classes of modules): assigning an
        # attribute through one of them is monkey-patching.
        self.imported: set[str] = set()
        # The instance parameter (`self`, `cls`) of each method being visited, innermost last;
        # None for a function that is not a method.
        self.instances: list[str | None] = []
        # The parameter names of each function being visited, innermost last: a parameter named
        # like a refused builtin (`def reduce(op, input, initial)`) is the caller's value there,
        # not the builtin, so reading it is allowed.
        self.parameters: list[frozenset[str]] = []
        self.class_depth = 0

    def _refuse(self, node: ast.AST, reason: str) -> None:
        if self.violation is None:
            self.violation = Violation(reason, getattr(node, "lineno", None))

    def generic_visit(self, node: ast.AST) -> None:
        if self.violation is None:
            super().generic_visit(node)

    # --- imports -----------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imported.add(alias.asname or alias.name.split(".")[0])
            if not module_allowed(alias.name, self.policy):
                self._refuse(node, f"import of '{alias.name}' is not allowed ({self._allowed_text()})")
            elif alias.asname and alias.asname.startswith("_"):
                self._refuse(node, f"import alias '{alias.asname}' may not start with '_'")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self._refuse(
                node,
                f"relative imports reach only module files of the kernel's own package (folders with "
                f"__init__.py) that the kernel's saved file imports; '{'.' * node.level}{module}' is not one",
            )
        elif module == "__future__":
            pass
        elif not module_allowed(module, self.policy):
            self._refuse(node, f"import from '{module}' is not allowed ({self._allowed_text()})")
        else:
            for alias in node.names:
                self.imported.add(alias.asname or alias.name)
                if alias.name != "*" and (
                    alias.name.startswith("_")
                    or alias.name in DENIED_ATTRIBUTES
                    or (self.policy == "kernel" and alias.name in KERNEL_DENIED_ATTRIBUTES)
                    or not module_allowed(f"{module}.{alias.name}", self.policy)
                ):
                    self._refuse(node, f"importing '{alias.name}' from '{module}' is not allowed")
        self.generic_visit(node)

    def _allowed_text(self) -> str:
        allowed = KERNEL_MODULES if self.policy == "kernel" else REFERENCE_MODULES
        return "allowed: " + ", ".join(sorted(m for m in allowed if m != "__future__"))

    # --- names and attributes -----------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in DENIED_NAMES and not any(node.id in names for names in self.parameters):
            self._refuse(node, f"'{node.id}' is not allowed in sandboxed code")
        elif node.id.startswith("__") and not (
            self.policy == "reference" and node.id in REFERENCE_DUNDER_NAMES
        ):
            self._refuse(node, f"dunder name '{node.id}' is not allowed")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        reason = self._attribute_refusal(node.attr, node.value)
        if reason is not None:
            self._refuse(node, reason)
        elif isinstance(node.ctx, (ast.Store, ast.Del)) and _root_name(node) in self.imported:
            self._refuse(
                node,
                f"assigning or deleting attribute '.{node.attr}' of the imported '{_root_name(node)}' "
                "is not allowed (no monkey-patching)",
            )
        self.generic_visit(node)

    def _attribute_refusal(self, attr: str, base: ast.expr | None) -> str | None:
        """Why reading `attr` (of `base`, when known) is refused, or None."""
        if attr.startswith("__") and attr.endswith("__"):
            if (attr in SUPER_METHODS and _is_super_call(base)) or attr in SYNTAX_DUNDERS:
                return None
            return f"access to private or dunder attribute '.{attr}' is not allowed"
        if attr.startswith("_"):
            if isinstance(base, ast.Name) and self.instances and base.id == self.instances[-1]:
                return None  # a method's own private state: `self._cache`
            return f"access to private or dunder attribute '.{attr}' is not allowed"
        if attr in DENIED_ATTRIBUTES or (self.policy == "kernel" and attr in KERNEL_DENIED_ATTRIBUTES):
            return f"access to '.{attr}' is not allowed in sandboxed code"
        return None

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        # `case C(attr=pattern)` reads `attr` like `subject.attr` does.
        for attr in node.kwd_attrs:
            reason = self._attribute_refusal(attr, None)
            if reason is not None:
                self._refuse(node, f"match pattern: {reason}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                reason = self._attribute_refusal(name.value, None)
                if reason is not None:
                    self._refuse(node, f"getattr: {reason}")
            # A computed name is checked when it is read, by the worker's guard.
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # `"{0.__globals__}".format(f)` reads attributes with no attribute node to check.
        if isinstance(node.value, str) and _format_reaches_private(node.value):
            self._refuse(node, "a format field may not reach private or dunder attributes")

    # --- definitions ---------------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        in_class = self.class_depth > 0 and self._directly_in_class
        if node.name.startswith("__") and not (in_class and node.name in ALLOWED_SPECIAL_METHODS):
            where = "in a class" if in_class else "outside a class"
            self._refuse(node, f"defining dunder '{node.name}' {where} is not allowed")
        positional = [*node.args.posonlyargs, *node.args.args]
        if in_class:
            instance = positional[0].arg if positional and not _is_staticmethod(node) else None
        else:  # a closure inside a method still sees the method's instance
            instance = self.instances[-1] if self.instances else None
            parameters = {a.arg for a in [*positional, *node.args.kwonlyargs]}
            if instance in parameters:
                instance = None
        if instance is not None and _rebinds(node, instance):
            instance = None
        # defaults and decorators run in the enclosing scope, where the parameters are not bound yet
        for outer in [*node.args.defaults, *node.args.kw_defaults, *node.decorator_list]:
            if outer is not None:
                self.visit(outer)
        self.instances.append(instance)
        arguments = [*positional, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
        self.parameters.append(
            frozenset(a.arg for a in arguments if a is not None and not a.arg.startswith("__"))
        )
        directly, self._directly_in_class = self._directly_in_class, False
        try:
            self.generic_visit(node)
        finally:
            self.instances.pop()
            self.parameters.pop()
            self._directly_in_class = directly

    _directly_in_class = False

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._refuse(node, "async functions are not allowed in sandboxed code")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name.startswith("__"):
            self._refuse(node, f"defining dunder '{node.name}' is not allowed")
        for keyword in node.keywords:
            if keyword.arg == "metaclass":
                self._refuse(node, "custom metaclasses are not allowed in sandboxed code")
        self.class_depth += 1
        directly, self._directly_in_class = self._directly_in_class, True
        self.instances.append(None)
        try:
            self.generic_visit(node)
        finally:
            self.instances.pop()
            self._directly_in_class = directly
            self.class_depth -= 1

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name.startswith("__"):
                self._refuse(node, f"global dunder '{name}' is not allowed")
        self.generic_visit(node)


def _root_name(node: ast.expr) -> str | None:
    """The name at the root of an attribute chain (`np` in `np.ma.core.x`), if it is a name."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_super_call(node: ast.expr | None) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
        and not node.args
        and not node.keywords
    )


def _is_staticmethod(node: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)


def _rebinds(function: ast.FunctionDef, name: str) -> bool:
    """Whether `name` is assigned anywhere in `function` (then it may not be the instance)."""
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return True
    return False


def _format_reaches_private(text: str) -> bool:
    """Whether a format string has a replacement field reaching `._x` (`"{0.__class__}"`)."""
    if "{" not in text or "_" not in text:
        return False
    import string

    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(text) if field]
    except ValueError:
        return False
    return any("._" in field for field in fields)

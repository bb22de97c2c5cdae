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

PolicyName = Literal["kernel", "reference"]

# Top-level modules a kernel may import. `neuronxcc` and `nki` are the NKI names the emulator
# aliases; `__future__` is a compiler directive, not a module load.
KERNEL_MODULES = frozenset({"numpy", "math", "neuronxcc", "nki", "__future__"})
# A reference module is the user's own numpy code (never a model's); it may also use a few pure
# standard-library helpers that reference implementations commonly reach for.
REFERENCE_MODULES = KERNEL_MODULES | frozenset(
    {"ml_dtypes", "functools", "itertools", "typing", "dataclasses"}
)

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
        "getattr",
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
    tree = ast.parse(text)
    checker = _PolicyChecker(policy)
    checker.visit(tree)
    return checker.violation


class _PolicyChecker(ast.NodeVisitor):
    def __init__(self, policy: PolicyName) -> None:
        self.policy: PolicyName = policy
        self.violation: Violation | None = None

    def _refuse(self, node: ast.AST, reason: str) -> None:
        if self.violation is None:
            self.violation = Violation(reason, getattr(node, "lineno", None))

    def generic_visit(self, node: ast.AST) -> None:
        if self.violation is None:
            super().generic_visit(node)

    # --- imports -----------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not module_allowed(alias.name, self.policy):
                self._refuse(node, f"import of '{alias.name}' is not allowed ({self._allowed_text()})")
            elif alias.asname and alias.asname.startswith("_"):
                self._refuse(node, f"import alias '{alias.asname}' may not start with '_'")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self._refuse(node, "relative imports are not allowed")
        elif module == "__future__":
            pass
        elif not module_allowed(module, self.policy):
            self._refuse(node, f"import from '{module}' is not allowed ({self._allowed_text()})")
        else:
            for alias in node.names:
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
        if node.id in DENIED_NAMES:
            self._refuse(node, f"'{node.id}' is not allowed in sandboxed code")
        elif node.id.startswith("__") and not (
            self.policy == "reference" and node.id in REFERENCE_DUNDER_NAMES
        ):
            self._refuse(node, f"dunder name '{node.id}' is not allowed")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            self._refuse(node, f"access to private or dunder attribute '.{node.attr}' is not allowed")
        elif node.attr in DENIED_ATTRIBUTES or (
            self.policy == "kernel" and node.attr in KERNEL_DENIED_ATTRIBUTES
        ):
            self._refuse(node, f"access to '.{node.attr}' is not allowed in sandboxed code")
        elif isinstance(node.ctx, (ast.Store, ast.Del)):
            self._refuse(
                node, f"assigning or deleting attribute '.{node.attr}' is not allowed (no monkey-patching)"
            )
        self.generic_visit(node)

    # --- definitions ---------------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._check_definition_name(node, node.name)
        self.generic_visit(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._refuse(node, "async functions are not allowed in sandboxed code")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if self.policy == "kernel":
            self._refuse(node, "class definitions are not allowed in kernels")
        else:
            self._check_definition_name(node, node.name)
        self.generic_visit(node)

    def _check_definition_name(self, node: ast.AST, name: str) -> None:
        if name.startswith("__"):
            self._refuse(node, f"defining dunder '{name}' is not allowed")

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name.startswith("__"):
                self._refuse(node, f"global dunder '{name}' is not allowed")
        self.generic_visit(node)

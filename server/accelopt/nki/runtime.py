"""Running kernels on the emulator: module aliasing, loading kernel text, the run itself, and
the SDK-shaped entry points (``nki.jit``, ``nki.baremetal``, ``nki.simulate_kernel``).

`install_aliases()` is called only in the process that emulates (the sandboxed worker, tests):
it must never shadow a real Neuron installation used by the hardware backend.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import itertools
import linecache
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from accelopt.nki import apiversion, loop_returns
from accelopt.nki.calllog import CallLog
from accelopt.nki.context import KernelContext, activate, active_context
from accelopt.nki.errors import NkiError
from accelopt.nki.instructions import SHARED_HBM
from accelopt.nki.loops import KernelRange
from accelopt.nki.python_source import parse_module
from accelopt.nki.spmd import Grid, check_cores
from accelopt.nki.target import kernel_target
from accelopt.nki.tensor import Tensor
from accelopt.nki.trace import Memory, ProgramSpan, Trace
from accelopt.nki.unsupported import as_nki_error

_MODULE_COUNTER = itertools.count()
# Found once at import (trusted code): at run time limiting BLAS threads only calls into the
# libraries already located, so sandboxed runs need no library scanning.
_BLAS_THREADS = ThreadpoolController()
# kernel function -> the options its decorators gave (`platform_target=`, ...): load_kernel hands
# out the plain function, run_kernel finds them here
_KERNEL_OPTIONS: weakref.WeakKeyDictionary[Callable[..., Any], dict[str, Any]] = weakref.WeakKeyDictionary()


@dataclass
class KernelRun:
    """What one emulated run produced: the outputs (flattened) and the instruction trace."""

    outputs: list[np.ndarray]
    trace: Trace
    # True when the kernel returned one tensor (not a tuple/list): `simulate` returns it bare.
    single: bool = True
    # True when the kernel returned nothing and its outputs are the arguments it stored into
    # (`def k(a, out)`): writing those inputs is then its job, not a fault.
    output_arguments: bool = False


# --- module aliasing -------------------------------------------------------------------------


def install_aliases() -> None:
    """Make ``neuronxcc.nki[.language|.isa|.typing]`` and ``nki[...]`` import the emulator."""
    from accelopt.nki import compiler, constants, facade, isa, isa_constants, language
    from accelopt.nki import typing as nki_typing

    neuronxcc = sys.modules.get("neuronxcc")
    if neuronxcc is None or getattr(neuronxcc, "__accelopt_emulator__", False) is False:
        neuronxcc = types.ModuleType(
            "neuronxcc", "AccelOpt NKI emulator alias of the Neuron compiler package"
        )
        neuronxcc.__path__ = []
        neuronxcc.__accelopt_emulator__ = True  # type: ignore[attr-defined]
    neuronxcc.nki = facade  # type: ignore[attr-defined]
    # The first NKI kernels were decorated with torch-neuronx's `nki_jit` (`from torch_neuronx
    # import nki_jit`; outputs passed as arguments): the alias holds that one name, the same jit.
    torch_neuronx = types.ModuleType("torch_neuronx", "AccelOpt NKI emulator alias: nki_jit only")
    torch_neuronx.nki_jit = jit  # type: ignore[attr-defined]
    isa.constants = isa_constants  # `import nki.isa.constants as c` finds the module as an attribute
    sys.modules.update(
        {
            "neuronxcc": neuronxcc,
            "neuronxcc.nki": facade,
            "neuronxcc.nki.language": language,
            "neuronxcc.nki.isa": isa,
            "neuronxcc.nki.typing": nki_typing,
            "neuronxcc.nki.language.constants": constants,
            "neuronxcc.nki.isa.constants": isa_constants,
            "neuronxcc.nki.compiler": compiler,
            "nki.compiler": compiler,
            "nki": facade,
            "nki.language": language,
            "nki.language.constants": constants,
            "nki.isa.constants": isa_constants,
            "nki.isa": isa,
            "nki.typing": nki_typing,
            "torch_neuronx": torch_neuronx,
        }
    )


# --- loading kernel text ---------------------------------------------------------------------


def load_module(text: str, path: str, namespace: dict[str, Any] | None = None) -> types.ModuleType:
    """Execute kernel-side source (a kernel file, or a helper module beside it) as a fresh
    module. `namespace` holds names bound before it runs (what its imports of sibling modules
    give it, bound by the caller instead of imported)."""
    install_aliases()
    code = compile(text, path, "exec")
    if loop_returns.might_need_hoisting(text):
        tree = parse_module(text, path)
        if loop_returns.hoist_loop_tail_returns(tree):
            code = compile(tree, path, "exec")
    module_name = f"accelopt_kernel_{next(_MODULE_COUNTER)}"
    module = types.ModuleType(module_name)
    module.__file__ = path
    # Plain `range` loops in the kernel are recorded in the trace as sequential loops.
    module.__dict__["range"] = KernelRange
    module.__dict__.update(namespace or {})
    linecache.cache[path] = (len(text), None, text.splitlines(keepends=True), path)
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
    except Exception as exc:  # e.g. an NKI decorator or constant at module level
        converted = as_nki_error(exc, path)
        if converted is None:
            raise
        raise converted from exc
    return module


def load_kernel(
    text: str, name: str, path: str = "<kernel>", namespace: dict[str, Any] | None = None
) -> Callable[..., Any]:
    """Execute kernel source as a fresh module and return its kernel function `name`.

    SyntaxError propagates unchanged (callers report it as a syntax error); a missing or
    non-callable `name` raises ValueError.
    """
    module = load_module(text, path, namespace)
    if name not in module.__dict__:
        functions = sorted(
            k for k, v in module.__dict__.items() if inspect.isfunction(v) or isinstance(v, Kernel)
        )
        raise ValueError(
            f"kernel {name!r} is not defined in {path} (functions: {', '.join(functions) or 'none'})"
        )
    fn = unwrap(module.__dict__[name])
    if not inspect.isfunction(fn):
        raise ValueError(f"{name!r} in {path} is not a kernel function (it is a {type(fn).__name__})")
    return fn


def kernel_api(fn: Callable[..., Any], path: str) -> apiversion.KernelApi:
    """The NKI generation a kernel function is written in, from its module's source (kept in
    linecache by `load_kernel`, read from disk for kernels imported as modules)."""
    text = "".join(linecache.getlines(path)) or "".join(linecache.getlines(fn.__code__.co_filename))
    return apiversion.detect(text)


def unwrap(fn: Any) -> Any:
    while isinstance(fn, Kernel):
        fn = fn.func
    return fn


# --- running ---------------------------------------------------------------------------------


def _input_tensor(ctx: KernelContext, value: np.ndarray, name: str, line: int) -> Tensor:
    array = np.asarray(value)
    data = None
    if ctx.numerics:
        # a read-only view: the caller's array is never modified, and copied only if the kernel
        # writes into its input (see View.write)
        data = array.view()
        data.flags.writeable = False
    tensor = Tensor(tuple(array.shape), array.dtype, SHARED_HBM, 0, data)
    ctx.register_tensor(tensor, name, line, is_input=True)
    tensor._written = True
    return tensor


def _flatten(result: Any) -> tuple[list[Tensor], bool]:
    if result is None:
        return [], False
    if isinstance(result, Tensor):
        return [result], True
    if isinstance(result, (tuple, list)):
        out: list[Tensor] = []
        for item in result:
            out.extend(_flatten(item)[0])
        return out, False
    raise NkiError(
        "err_unsupported_return", f"a kernel must return tensors (or nothing), got {type(result).__name__}"
    )


def run_kernel(
    fn: Callable[..., Any],
    inputs: list[Any],
    *,
    numerics: bool = True,
    kernel_name: str | None = None,
    source_path: str | None = None,
    grid: Any = None,
    target: str | None = None,
    fast_paths: bool = True,
    record_calls: bool = False,
) -> KernelRun:
    """Run a kernel on numpy inputs. With ``numerics=False`` only shapes and regions are traced
    (outputs are NaN arrays of the right shape and dtype). ``fast_paths=False`` runs every
    statement through the semantic core (accelopt.nki.fast: the same trace, more slowly).
    ``record_calls`` (numeric runs) also logs every API call into ``trace.calls`` so a trusted
    process can re-run it (calllog.py).

    `grid` is an SPMD launch grid (``2``, ``(2, 2)``, ``(nl.nc(2), 2)``): every program instance
    runs, in launch order, on the same inputs and shared outputs (accelopt.nki.spmd). `target`
    (trn1, trn2, trn3) is the hardware the run is for; a kernel's own ``platform_target=`` wins."""
    fn = unwrap(fn)
    path = source_path or fn.__code__.co_filename
    ctx = KernelContext(kernel_name or fn.__name__, path, numerics, fast_paths, kernel_api(fn, path))
    ctx.target = ctx.trace.target = kernel_target(_KERNEL_OPTIONS.get(fn, {}), target, path, fn)
    ctx.trace.compiler_flags = tuple(_KERNEL_OPTIONS.get(fn, {}).get("compiler_flags", ()))
    ctx.trace.nki_api = ctx.api.key
    launch = Grid.of(grid) if grid is not None else None
    log = CallLog() if record_calls and numerics else None
    params = list(inspect.signature(fn).parameters)
    line = fn.__code__.co_firstlineno
    # Tile-sized matmuls run fastest on one BLAS thread (threads thrash on 128x512 tiles).
    blas = blas_single_thread() if numerics else contextlib.nullcontext()
    # Trace-only runs allocate a few small objects per instruction and keep the trace growing;
    # the cyclic collector's passes over them cost as much as the emulation itself. They create
    # no reference cycles (see Tensor._full_view), so reference counting frees their garbage.
    collector = contextlib.nullcontext() if numerics else _collector_paused()
    with activate(ctx), blas, collector:
        args = [
            _input_tensor(ctx, x, params[i] if i < len(params) else f"arg{i}", line)
            if isinstance(x, np.ndarray) and x.ndim > 0  # (a numpy scalar has no dimensions)
            else x
            for i, x in enumerate(inputs)
        ]
        if log is not None:
            log.inputs([(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)])
            ctx._call_log = log
        try:
            result = fn(*args) if launch is None else _run_grid(ctx, fn, args, launch)
        except Exception as exc:
            converted = as_nki_error(exc, path)
            if converted is None:
                raise
            raise converted from exc
        finally:
            ctx._call_log = None
        returned, single = _flatten(result)
        output_arguments = not returned
        if not returned:
            # kernels that write into their (output) arguments and return nothing
            returned = [a for a in args if isinstance(a, Tensor) and a._written and _was_stored(ctx, a)]
            single = len(returned) == 1
        if log is not None:
            log.returned(returned, single)
            ctx.trace.calls = log.entries
            ctx.trace.calls_failure = log.failure
        run = finish_run(ctx, returned, single, line)
        run.output_arguments = output_arguments
        return run


def blas_single_thread() -> Any:
    """A context in which BLAS uses one thread (what numeric runs of tile-sized work want)."""
    return _BLAS_THREADS.limit(limits=1, user_api="blas")


def finish_run(ctx: KernelContext, returned: list[Tensor], single: bool, line: int) -> KernelRun:
    """Mark the returned tensors as outputs, check each was written, finish the trace and read
    the outputs (inside the run's context: finishing builds a TensorInfo per kept tile)."""
    for tensor in returned:
        info = ctx.info(tensor._tid)
        if info is not None:
            info.is_output = True
        if tensor.memory is Memory.HBM and not (tensor if tensor._root is None else tensor._root)._written:
            raise NkiError(
                "err_tensor_output_not_written_to",
                f"output tensor '{info.name if info else tensor._tid}' is returned but never written "
                "(store into it with nl.store)",
                ctx.kernel_path,
                info.line if info else line,
            )
    trace = ctx.finish()
    outputs = [_output_array(t, ctx.numerics) for t in returned]
    return KernelRun(outputs=outputs, trace=trace, single=single)


def mark_kernel(kernel: Any, flag: str) -> None:
    """Note a compiler decorator (accelopt.nki.compiler) on a kernel function or nki.jit kernel."""
    fn = unwrap(kernel)
    options = _KERNEL_OPTIONS.setdefault(fn, {})
    options["compiler_flags"] = (*options.get("compiler_flags", ()), flag)


def _run_grid(ctx: KernelContext, fn: Callable[..., Any], args: list[Any], launch: Grid) -> Any:
    """Every program instance of `launch`, in launch order; the first instance's result."""
    line = fn.__code__.co_firstlineno
    check_cores(launch, ctx.target, ctx.kernel_path, line)
    ctx.grid_sizes = ctx.trace.grid = launch.sizes
    if launch.count == 1:
        ctx.program_ids = (0,) * len(launch.sizes)
        return fn(*args)
    ctx.shared_outputs = []
    result: Any = None
    for index, (ids, core) in enumerate(launch.instances(ctx.target)):
        ctx.program_ids = ids
        ctx.program_index = index
        ctx.shared_cursor = 0
        ctx.loop_reduce_state = {}  # keyed by loop frames, which every instance repeats
        if ctx._call_log is not None:
            ctx._call_log.program(index, ids, core, launch.sizes)
        first = len(ctx.trace.records)
        returned = fn(*args)
        if index == 0:
            result = returned
        elif _differ(_flatten(returned)[0], _flatten(result)[0]):
            raise NkiError(
                "err_spmd_outputs_differ",
                f"program instance {ids} returns other tensors than instance "
                f"{(0,) * len(ids)}; every instance must return the same shared_hbm outputs",
                ctx.kernel_path,
                line,
            )
        ctx.trace.programs.append(ProgramSpan(ids, core, first, len(ctx.trace.records)))
    return result


def _differ(mine: list[Tensor], first: list[Tensor]) -> bool:
    return len(mine) != len(first) or any(a is not b for a, b in zip(mine, first))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                # Everything the run made (the whole trace) sits in the youngest generation:
                # the first collection after re-enabling would walk all of it, the next
                # generation's again, and its survivors would hasten full collections of the
                # whole process (measured: 20-35% of a warm trace-only run). freeze + unfreeze
                # splices it straight into the oldest generation instead (no walk). Runs make
                # no reference cycles (numeric runs neither: see Tensor._full_view), so nothing
                # waits there for a full collection that reference counting would not free.
                # Only when nothing else in the process froze objects: unfreeze releases those.
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def _was_stored(ctx: KernelContext, tensor: Tensor) -> bool:
    tid = tensor._tid
    return any(w.tensor_id == tid for r in ctx.trace.records for w in r.writes)


def _output_array(tensor: Tensor, numerics: bool) -> np.ndarray:
    if numerics and tensor._data is not None:
        return tensor._data if tensor._data.flags.writeable else tensor._data.copy()
    nan = np.array(np.nan if tensor.dtype.kind in "fV" else 0, dtype=tensor.dtype)
    return np.broadcast_to(nan, tensor.shape)


# --- SDK-shaped entry points -------------------------------------------------------------------


class Kernel:
    """What ``@nki.jit`` (and baremetal/trace/benchmark) make of a kernel function.

    Called with numpy arrays outside a run, it emulates the kernel and returns numpy output(s);
    called from inside a running kernel (a kernel calling another), it is the plain function.
    """

    def __init__(self, func: Callable[..., Any], **options: Any) -> None:
        self.func = func
        self.options = options
        if options:
            _KERNEL_OPTIONS[func] = {**_KERNEL_OPTIONS.get(func, {}), **options}
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if active_context() is not None or any(isinstance(a, Tensor) for a in args):
            return self.func(*args, **kwargs)
        if kwargs:
            bound = inspect.signature(self.func).bind(*args, **kwargs)
            args = tuple(bound.args)
        return _simulate_call(self.func, list(args))

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        """``kernel[g](...)`` / ``kernel[g1, g2](...)``: launch every program instance of the grid."""
        launch = Grid.of(grid)

        def launched(*args: Any, **kwargs: Any) -> Any:
            if active_context() is not None or any(isinstance(a, Tensor) for a in args):
                return self.func(*args, **kwargs)  # a kernel calling a kernel: one instance
            if kwargs:
                args = tuple(inspect.signature(self.func).bind(*args, **kwargs).args)
            return _simulate_call(self.func, list(args), grid=launch)

        return launched

    def __repr__(self) -> str:
        return f"<nki kernel {self.func.__name__}>"


def _simulate_call(fn: Callable[..., Any], args: list[Any], grid: Any = None) -> Any:
    run = run_kernel(fn, args, numerics=True, grid=grid)
    if run.single and len(run.outputs) == 1:
        return run.outputs[0]
    return tuple(run.outputs)


def _decorator(func: Callable[..., Any] | None, options: dict[str, Any]) -> Any:
    if func is None:
        return lambda f: Kernel(unwrap(f), **options)
    return Kernel(unwrap(func), **options)


def jit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    return _decorator(func, options)


def baremetal(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    return _decorator(func, options)


def benchmark(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    return _decorator(func, options)


def profile(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    return _decorator(func, options)


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """``nki.simulate_kernel(kernel, *numpy_inputs)`` → numpy output(s)."""
    fn = unwrap(kernel)
    if kwargs:
        args = tuple(inspect.signature(fn).bind(*args, **kwargs).args)
    return _simulate_call(fn, list(args))


def simulate(kernel: Any) -> Callable[..., Any]:
    """``simulate(kernel)(*numpy_inputs)`` → numpy output(s)."""
    return functools.partial(simulate_kernel, kernel)

"""The sandboxed worker: the only place untrusted code (kernels, reference modules) ever runs.

Started by `accelopt.profiling.sandbox` as ``python -I -B -c <bootstrap> <accelopt root> <job dir>``.
Order matters, and is the point of this file:

1. resource limits and a parent-death signal, before anything else;
2. every trusted import (numpy, the emulator, the NKI aliases) and the result files opened;
3. the runtime guard installed (`accelopt.profiling.guard`): from here on it never switches off;
4. the untrusted code runs: one run per seed or input set;
5. results written through the files opened in step 2, as plain JSON and `.npz` (never pickles).

The parent trusts nothing here: it validates every file and does the correctness comparison and
the timing itself. This module deliberately avoids pydantic to keep the worker's start-up short;
the job it reads was written by the trusted parent (`worker_protocol.WorkerJob`).
"""

from __future__ import annotations

import functools
import json
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

_MAX_MESSAGE = 1500


def main(job_dir: str) -> int:
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as f:
        job: dict[str, Any] = json.load(f)
    _apply_limits(job["limits"])
    # Past the file-size limit a write should fail (an error we can report), not kill the worker.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _die_with_parent(int(job.get("parent_pid") or 0))
    sys.dont_write_bytecode = True

    import io
    import linecache
    import warnings
    import zipfile

    import numpy as np
    import numpy.lib.format

    from accelopt.profiling import arrays, guard

    np.savez(io.BytesIO(), warmup=np.zeros(1))  # load zipfile & co. while imports are trusted
    # Warnings the untrusted code raises (numpy's "overflow encountered in exp") are recorded,
    # not shown: showing one reads the warned-about source line, and the guard refuses that read.
    # The module's text is in the line cache anyway, so a message can still quote it.
    linecache.cache[job["source_path"]] = (
        len(job["source"]),
        None,
        job["source"].splitlines(keepends=True),
        job["source_path"],
    )
    caught_warnings = warnings.catch_warnings(record=True)
    warned = caught_warnings.__enter__()
    warnings.simplefilter("default")
    runtime = None
    if job["mode"] == "kernel":
        from accelopt.nki import runtime as _runtime

        runtime = _runtime
        runtime.install_aliases()
        if job.get("grid"):  # parsed while imports are trusted; the parent checked its form
            from accelopt.nki.spmd import parse_grid

            job["_grid"] = parse_grid(job["grid"])

    out_dir = os.path.join(job_dir, "out")
    status_file = open(os.path.join(out_dir, "status.json"), "w", encoding="utf-8")
    arrays_file = open(os.path.join(out_dir, "arrays.npz"), "wb")
    # Arrays are written into the archive as each run produces them and then let go, so a
    # worker holds one seed's data at a time (full-size tasks have 1 GiB outputs per seed).
    archive = zipfile.ZipFile(arrays_file, "w", allowZip64=True)
    trace_file = open(os.path.join(out_dir, "trace.json"), "w", encoding="utf-8")

    def run_inputs(run: list[dict[str, Any]]) -> list[Any]:
        # Read when its run starts (not all seeds up front); trusted code reading `in/`. A
        # trace-only run's inputs come as shapes only: it reads no values (arrays.ShapeOnly).
        return [
            arrays.from_transport(
                np.load(os.path.join(job_dir, ref["name"]), allow_pickle=False), ref["dtype"]
            )
            if ref.get("stored", True)
            else arrays.shape_only(ref["shape"], ref["dtype"])
            for ref in run
        ]

    runs_inputs: list[Callable[[], list[Any]]] = [
        functools.partial(run_inputs, run) for run in job.get("inputs", [])
    ]
    npz = _load_npz(os.path.join(job_dir, "in", "outputs.npz")) if job["mode"] == "transform" else None

    # No more processes or threads from here on (kernel-enforced for non-root users), and the
    # system-call filter, now with exec refused too (bubblewrap's copy had to let us start).
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    _filter_system_calls()
    probe = _probe(job_dir) if job["mode"] == "probe" else None
    source_path = job["source_path"]
    watched = [
        m for m in sys.modules if m in ("numpy", "math") or m.startswith(("accelopt.nki", "numpy.random"))
    ]
    namespaces = guard.namespace_snapshot(watched)
    if job.get("python_guard", True):
        guard.install(
            policy=job["policy"],
            user_files=[source_path, *(m["path"] for m in job.get("modules", []))],
            trusted_roots=job["trusted_roots"],
            read_roots=job["read_roots"],
        )

    result: dict[str, Any] = {"failure": None, "runs": [], "work": None, "has_trace": False}
    result["probe"] = probe
    saved = _Archive(archive, np, job.get("max_run_bytes"))
    trace = None
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        if job["mode"] == "kernel":
            trace = _run_kernel(job, runtime, runs_inputs, result, saved, np, arrays)
        elif job["mode"] == "reference":
            _run_reference(job, result, saved, np, arrays)
        elif job["mode"] == "transform":
            _run_transform(job, npz, result, saved, np, arrays)
    except BaseException as exc:  # everything the untrusted code does is a result, not a crash
        result["failure"] = _describe_failure(exc, source_path)
        if job["mode"] == "kernel":
            result["failure"]["run"] = len(result["runs"])  # the input set it failed on
        sibling = _innermost_sibling(exc, source_path, [m["path"] for m in job.get("modules", [])])
        if sibling is not None and result["failure"]["kind"] == "runtime_error":
            # The kernel's line is where it called the helper; say where the helper failed.
            result["failure"]["message"] = _clip(f"{result['failure']['message']} (at {sibling})")
    result["seconds"] = time.perf_counter() - started
    result["cpu_seconds"] = time.process_time() - cpu_started
    guard.check_unpatched(namespaces, watched)
    result["warnings"] = _describe_warnings(warned, source_path)

    recorded = guard.violation()
    if recorded is not None:  # wins even when the untrusted code swallowed the exception
        result["failure"] = {
            "kind": "rejected",
            "message": recorded.reason,
            "line": recorded.line if recorded.path == source_path else None,
            "path": recorded.path,
        }
    if result["failure"] is None:
        if trace is not None and job.get("return_trace", True):
            trace_file.write(trace.to_json())
            result["has_trace"] = True
    archive.close()
    trace_file.close()
    arrays_file.close()
    json.dump(result, status_file)
    status_file.close()
    return 0


def _filter_system_calls() -> None:
    from accelopt.profiling import seccomp

    if sys.platform.startswith("linux") and seccomp.supported():
        seccomp.install(seccomp.build(exec_allowed=False))


def _probe(job_dir: str) -> dict[str, Any]:
    """What the sandbox looks like from inside (trusted code; used by tests and diagnostics)."""
    limits = {
        name: resource.getrlimit(getattr(resource, name))[0]
        for name in (
            "RLIMIT_AS",
            "RLIMIT_CPU",
            "RLIMIT_NOFILE",
            "RLIMIT_FSIZE",
            "RLIMIT_NPROC",
            "RLIMIT_CORE",
        )
    }
    try:  # this process's network namespace, as the kernel sees it
        with open("/proc/self/net/dev", encoding="ascii") as f:
            interfaces = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
    except OSError:
        interfaces = []
    status = _read_text("/proc/self/status")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "uid": os.getuid(),
        "uid_map": _read_text("/proc/self/uid_map").split(),
        "seccomp": fields.get("Seccomp", "").strip(),
        "no_new_privs": fields.get("NoNewPrivs", "").strip(),
        "capabilities": fields.get("CapEff", "").strip(),
        "permitted_capabilities": fields.get("CapPrm", "").strip(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "cwd_entries": sorted(os.listdir(".")),
        "environment": dict(os.environ),
        "limits": limits,
        "network_interfaces": interfaces,
        "interpreter_flags": {
            "no_user_site": bool(sys.flags.no_user_site),
            "safe_path": bool(getattr(sys.flags, "safe_path", False)),  # Python 3.11+ (-P)
            "dont_write_bytecode": bool(sys.flags.dont_write_bytecode),
            "hash_randomization": bool(sys.flags.hash_randomization),
        },
        "path_has_cwd": any(entry in ("", ".", os.getcwd()) for entry in sys.path),
        "job_dir": job_dir,
    }


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return ""


def _apply_limits(limits: dict[str, int]) -> None:
    def cap(which: int, value: int) -> None:
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

    cap(resource.RLIMIT_AS, int(limits["memory_bytes"]))
    cpu = int(limits["cpu_seconds"])
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 2 if hard == resource.RLIM_INFINITY else hard))
    cap(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    cap(resource.RLIMIT_FSIZE, int(limits["file_bytes"]))
    cap(resource.RLIMIT_CORE, 0)


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to kill this worker if its parent dies, so a crashed server leaves no orphans."""
    from accelopt.profiling.parent_death import die_with_parent

    if die_with_parent(signal.SIGKILL) and parent_pid and os.getppid() != parent_pid:
        os._exit(70)  # the parent is already gone


def _load_npz(path: str) -> dict[str, Any]:
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _as_list(value: Any) -> tuple[list[Any], str]:
    if isinstance(value, tuple):
        return list(value), "tuple"
    if isinstance(value, list):
        return list(value), "list"
    return [value], "single"


class _Archive:
    """Where a worker's result arrays go: straight into `out/arrays.npz` (a zip of `.npy`
    members, what `np.savez` writes), one array at a time."""

    def __init__(self, archive: Any, np: Any, budget: int | None) -> None:
        self.archive = archive
        self.np = np
        self.budget = budget
        self.written = 0

    def __setitem__(self, key: str, array: Any) -> None:
        with self.archive.open(f"{key}.npy", "w", force_zip64=True) as member:
            self.np.lib.format.write_array(member, array, allow_pickle=False)
        self.written += int(array.nbytes)

    def full(self) -> bool:
        """Whether the job's byte budget is spent: the worker stops after the current run and
        the parent asks a new worker for the remaining seeds (bounded memory on both sides)."""
        return self.budget is not None and self.written >= self.budget


def _kernel_argument(value: Any) -> Any:
    """A 0-d input is a scalar argument (an epsilon, a count): the kernel gets it back as the
    Python number it was in the task (a float64/int64/bool 0-d array) or as a numpy scalar."""
    if getattr(value, "ndim", None) != 0:
        return value
    return value.item() if value.dtype.name in ("float64", "int64", "bool") else value[()]


def _save_group(
    saved: _Archive, prefix: str, values: list[Any], np: Any, arrays: Any, shapes_only: bool = False
) -> list[dict[str, Any]]:
    """Write a run's arrays; `shapes_only`: their shapes and dtypes only (the same checks, no
    values written but those of 0-d arrays: scalars a kernel may compute with)."""
    refs = []
    for j, value in enumerate(values):
        array = value if type(value) is np.ndarray else np.asarray(value)
        if array.dtype.kind not in "biufV":
            raise TypeError(f"output {j} has dtype {array.dtype}; expected a numeric array")
        key = f"{prefix}_{j}"
        ref = {"name": key, "dtype": arrays.dtype_name(array), "shape": list(array.shape)}
        if shapes_only and array.ndim:
            arrays.to_transport(array.reshape(-1)[:1])  # (refuses a dtype the sandbox cannot exchange)
            ref["stored"] = False
        else:
            saved[key] = arrays.to_transport(array)
        refs.append(ref)
    return refs


def _bound(bindings: list[dict[str, Any]], modules: dict[str, Any]) -> dict[str, Any]:
    """The names a module's sibling imports would have bound, from the modules already run."""
    return {
        b["target"]: modules[b["module"]]
        if b["attribute"] is None
        else vars(modules[b["module"]])[b["attribute"]]
        for b in bindings
    }


# The job is plain JSON (no pydantic here, see above); numpy, the emulator's runtime and the
# array transport come in as modules, imported by `main` in the trusted phase.
Job = dict[str, Any]


def _run_kernel(
    job: Job,
    runtime: Any,
    runs_inputs: list[Callable[[], list[Any]]],
    result: dict[str, Any],
    saved: _Archive,
    np: Any,
    arrays: Any,
) -> Any:
    name = job["kernel_name"]
    grid = job.get("_grid")
    modules: dict[str, Any] = {}
    for sibling in job.get("modules", []):  # dependencies first (the parent ordered them)
        modules[sibling["name"]] = runtime.load_module(
            sibling["source"], sibling["path"], _bound(sibling["bindings"], modules)
        )
    fn = runtime.load_kernel(
        job["source"], name, job["source_path"], _bound(job.get("bindings", []), modules)
    )
    tuples = {t["position"]: tuple(t["items"]) for t in job.get("tuple_arguments", [])}
    trace = None
    for i, load_inputs in enumerate(runs_inputs):
        inputs = load_inputs()
        run = runtime.run_kernel(
            fn,
            [tuples[i] if i in tuples else _kernel_argument(a) for i, a in enumerate(inputs)],
            numerics=job["numerics"],
            kernel_name=name,
            source_path=job["source_path"],
            grid=grid,
            target=job.get("hardware") or None,
            record_calls=i == 0 and bool(job.get("record_calls")),
        )
        if trace is None:
            trace = run.trace
        outputs = list(run.outputs)
        structure = "single" if getattr(run, "single", len(outputs) == 1) else "tuple"
        groups: dict[str, list[dict[str, Any]]] = {}
        record = {
            "structure": structure,
            "groups": groups,
            "input_fingerprints": [arrays.fingerprint(a) for a in inputs],
            "output_arguments": bool(getattr(run, "output_arguments", False)),
        }
        if job["numerics"]:
            groups["outputs"] = _save_group(saved, f"r{i}_out", outputs, np, arrays)
        result["runs"].append(record)
        del run, outputs, inputs  # one seed's arrays at a time
        if saved.full():
            break
    return trace


def _load_reference_module(job: Job) -> Any:
    import types

    module = types.ModuleType("accelopt_reference")
    module.__file__ = job["source_path"]
    code = compile(job["source"], job["source_path"], "exec")
    exec(code, module.__dict__)
    return module


def _get_inputs(module: Any, job: Job) -> Any:
    """`get_inputs()` as the module defines it: with the size by keyword or position, or with
    no argument at all (the published NKIBench modules fix their shapes at module level)."""
    call = job.get("size_argument", "positional")
    if call == "keyword":
        return module.get_inputs(size=job["size"])
    if call == "positional":
        return module.get_inputs(job["size"])
    return module.get_inputs()


def _run_reference(job: Job, result: dict[str, Any], saved: _Archive, np: Any, arrays: Any) -> None:
    module = _load_reference_module(job)
    for i, seed in enumerate(job["seeds"]):
        np.random.seed(seed)
        raw = list(_get_inputs(module, job))
        shapes_only = bool(job.get("shapes_only"))  # for a trace-only run: nothing reads the values
        nki_inputs = list(module.transform_to_nki_inputs(raw))
        if not shapes_only:  # copies: forward() may reuse or modify its arguments in place
            nki_inputs = [np.array(a, copy=True) for a in nki_inputs]
        groups = {"inputs": _save_group(saved, f"r{i}_in", nki_inputs, np, arrays, shapes_only)}
        record: dict[str, Any] = {"structure": "list", "groups": groups}
        if i == 0 and callable(getattr(module, "work", None)):
            result["work"] = {str(k): float(v) for k, v in dict(module.work(*raw)).items()}
        if not job.get("inputs_only"):
            ref, structure = _as_list(module.forward(*raw))
            record["structure"] = structure
            groups["outputs"] = _save_group(saved, f"r{i}_ref", ref, np, arrays)
            del ref
        result["runs"].append(record)
        del raw, nki_inputs  # one seed's arrays at a time
        if saved.full():
            break


def _run_transform(
    job: Job, npz: dict[str, Any] | None, result: dict[str, Any], saved: _Archive, np: Any, arrays: Any
) -> None:
    module = _load_reference_module(job)
    assert npz is not None  # a transform job comes with the outputs to transform

    def rebuild(refs: list[dict[str, Any]]) -> list[Any]:
        return [arrays.from_transport(npz[r["name"]], r["dtype"]) for r in refs]

    for i, (k_refs, r_refs) in enumerate(zip(job["kernel_outputs"], job["reference_outputs"])):
        kernel_out = rebuild(k_refs)
        structure = job["kernel_structures"][i]
        kernel_value = kernel_out[0] if structure == "single" and len(kernel_out) == 1 else tuple(kernel_out)
        ref_out = rebuild(r_refs)
        ref_value = ref_out[0] if len(ref_out) == 1 else tuple(ref_out)
        k_list, r_list = _transformed(module.transform_nki_outputs(kernel_value, ref_value), ref_out)
        result["runs"].append(
            {
                "structure": "list",
                "groups": {
                    "kernel": _save_group(saved, f"r{i}_k", list(k_list), np, arrays),
                    "reference": _save_group(saved, f"r{i}_r", list(r_list), np, arrays),
                },
            }
        )


def _transformed(value: Any, ref_out: list[Any]) -> tuple[list[Any], list[Any]]:
    """Both conventions of `transform_nki_outputs`: ours returns the pair (kernel outputs,
    reference outputs), two lists; the published NKIBench modules return the kernel outputs
    only (a list of arrays), to be compared with the reference's outputs as they are."""
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(side, (tuple, list)) for side in value)
    ):
        return list(value[0]), list(value[1])
    if isinstance(value, (tuple, list)):
        return list(value), list(ref_out)
    return [value], list(ref_out)


def _describe_warnings(warned: list[Any], source_path: str) -> list[dict[str, Any]]:
    """The distinct warnings the untrusted code raised (at most a few), with their line."""
    seen: list[dict[str, Any]] = []
    for item in warned:
        entry = {
            "category": getattr(item.category, "__name__", "Warning"),
            "message": _clip(str(item.message))[:300],
            "line": item.lineno if item.filename == source_path else None,
        }
        if entry not in seen:
            seen.append(entry)
        if len(seen) >= 5:
            break
    return seen


def _describe_failure(exc: BaseException, source_path: str) -> dict[str, Any]:
    """Classify what the untrusted code raised, with its line in the untrusted source."""
    line = _innermost_line(exc, source_path)
    if isinstance(exc, SyntaxError) and exc.filename in (source_path, "<unknown>", None):
        return {
            "kind": "syntax_error",
            "message": _clip(f"{exc.msg}"),
            "exception": type(exc).__name__,
            "line": exc.lineno,
        }
    code = getattr(exc, "code", None)
    if type(exc).__name__ == "NkiError" and isinstance(code, str):
        nki_line = getattr(exc, "line", None)
        if getattr(exc, "path", None) != source_path or not isinstance(nki_line, int) or nki_line <= 0:
            nki_line = line
        return {
            "kind": "compile_error",
            "message": _clip(str(getattr(exc, "message", exc))),
            "exception": "NkiError",
            "error_code": code,
            "line": nki_line,
        }
    if isinstance(exc, MemoryError):
        message = "MemoryError: ran out of memory (the sandbox limits the worker's address space)"
    elif isinstance(exc, RecursionError):
        message = "RecursionError: maximum recursion depth exceeded"
    else:
        try:
            text = str(exc)
        except Exception:
            text = "<unprintable>"
        message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return {"kind": "runtime_error", "message": _clip(message), "exception": type(exc).__name__, "line": line}


def _innermost_sibling(exc: BaseException, source_path: str, paths: list[str]) -> str | None:
    """`helpers.py:12` when the innermost untrusted frame is in a module beside the kernel."""
    where = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        filename = frame.f_code.co_filename
        if filename in paths:
            where = f"{os.path.basename(filename)}:{lineno}"
        elif filename == source_path:
            where = None  # the kernel's own code is deeper: its line says it all
    return where


def _innermost_line(exc: BaseException, source_path: str) -> int | None:
    # Walk frames directly: traceback's line lookup would read the source file from disk.
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == source_path:
            line = lineno
    return line


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))

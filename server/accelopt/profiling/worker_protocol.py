"""What the trusted parent and the sandboxed worker say to each other.

A job directory holds `job.json` (written by the parent), `in/` (input arrays as `.npy`), and
`out/` where the worker writes `status.json`, `arrays.npz` and `trace.json`. The parent validates
everything it reads back with these models: the worker ran untrusted code, so its files are
untrusted data.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from accelopt.profiling.policy import PolicyName

JobMode = Literal["kernel", "reference", "transform", "probe"]
FailureKind = Literal["syntax_error", "compile_error", "runtime_error", "rejected"]
OutputStructure = Literal["single", "tuple", "list"]
# How `get_inputs` takes the size: `get_inputs(size="small")`, `get_inputs("small")`, or not at
# all (`get_inputs()`: the published NKIBench modules fix their shapes at module level).
SizeArgument = Literal["keyword", "positional", "none"]


class ArrayRef(BaseModel):
    """One array in a job directory: an `.npy` file (inputs) or a key of `out/arrays.npz`."""

    name: str = Field(pattern=r"^[A-Za-z0-9_./-]+$")
    dtype: str
    shape: tuple[int, ...] = ()
    stored: bool = Field(
        True,
        description="False: only the shape and dtype travel, no file (the inputs of a trace-only run, "
        "which reads no values; the input shapes a reference run reports for one)",
    )


# What a job's scratch folder (`work/`, the worker's HOME and TMPDIR) may hold unless told.
DEFAULT_SCRATCH_BYTES = 64 << 20


class ResourceLimits(BaseModel):
    """Kernel-enforced limits on the worker process (`setrlimit`)."""

    memory_bytes: int = Field(4 << 30, ge=256 << 20, description="address space (RLIMIT_AS)")
    cpu_seconds: int = Field(300, ge=1, description="CPU time (RLIMIT_CPU); exceeding it is a timeout")
    open_files: int = Field(64, ge=16, description="file descriptors (RLIMIT_NOFILE)")
    file_bytes: int = Field(
        4 << 30, ge=1 << 20, description="largest file the worker may write (RLIMIT_FSIZE)"
    )
    scratch_bytes: int = Field(
        DEFAULT_SCRATCH_BYTES,
        ge=1 << 20,
        description="what the scratch folder (work/) may hold in all; under OS isolation it is a tmpfs "
        "of this size, so many files cannot fill the disk either",
    )


class ModuleBinding(BaseModel):
    """A name the worker binds in a module before running it: a sibling module (`attribute`
    None) or one of its attributes (what `from helpers import add` would have bound)."""

    target: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    module: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    attribute: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class TupleArgument(BaseModel):
    """A kernel argument that is a tuple of numbers, at `position` in the inputs."""

    position: int = Field(ge=0)
    items: list[bool | int | float]


class SiblingSource(BaseModel):
    """A module beside the kernel file, as it runs (its slice), dependencies first."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    path: str
    source: str
    bindings: list[ModuleBinding] = Field(default_factory=list)


class WorkerJob(BaseModel):
    mode: JobMode
    policy: PolicyName
    source: str = Field(description="the untrusted module text (kernel or reference module)")
    source_path: str = Field(description="filename its code runs under: how its frames are recognised")
    kernel_name: str | None = None
    # kernel mode: the modules beside the kernel file it imports, and the names they bind in it
    modules: list[SiblingSource] = Field(default_factory=list)
    bindings: list[ModuleBinding] = Field(default_factory=list)
    # kernel mode: tuple arguments (`# accelopt: inputs shape2D=(3,4)`): their inputs travel as
    # 0-d placeholders, and the worker passes these items, as a tuple, in their place
    tuple_arguments: list[TupleArgument] = Field(default_factory=list)
    numerics: bool = True
    # kernel mode: the hardware the run is for (nisa.get_nc_version) and the SPMD launch grid
    # (`# accelopt: grid ...` text, read by accelopt.nki.spmd.parse_grid; None: no grid)
    hardware: str = "trn1"
    grid: str | None = None
    size: str = "full"
    size_argument: SizeArgument = "positional"
    # reference mode: one run per seed (np.random.seed(seed) before get_inputs)
    seeds: list[int] = Field(default_factory=list)
    inputs_only: bool = False
    # reference mode with inputs_only: report the inputs' shapes and dtypes, not their values
    # (for a trace-only run); a 0-d input (a scalar the kernel may branch on) keeps its value
    shapes_only: bool = False
    # kernel mode: one run per input set; transform mode: per run, kernel and reference outputs
    inputs: list[list[ArrayRef]] = Field(default_factory=list)
    kernel_outputs: list[list[ArrayRef]] = Field(default_factory=list)
    kernel_structures: list[OutputStructure] = Field(default_factory=list)
    reference_outputs: list[list[ArrayRef]] = Field(default_factory=list)
    return_trace: bool = True
    python_guard: bool = Field(
        True,
        description="install the Python-level guard; only tests turn it off, to show what the "
        "operating system enforces on its own",
    )
    max_run_bytes: int | None = Field(
        None,
        description="stop after the run whose arrays bring the total past this many bytes: the "
        "result then has fewer runs than asked for, and the parent asks again for the rest",
    )
    record_calls: bool = False  # kernel mode: the first run logs its API calls (verification)
    limits: ResourceLimits = Field(default_factory=ResourceLimits)
    parent_pid: int = 0
    trusted_roots: list[str] = Field(default_factory=list)
    read_roots: list[str] = Field(default_factory=list)


class WorkerFailure(BaseModel):
    kind: FailureKind
    message: str = Field(max_length=4000)
    exception: str | None = None
    error_code: str | None = None
    line: int | None = None
    path: str | None = None
    run: int | None = Field(None, description="kernel mode: the input set (run) it failed on")


class RunResult(BaseModel):
    """What one run (one seed / input set) produced: named groups of arrays in `arrays.npz`."""

    groups: dict[str, list[ArrayRef]] = Field(default_factory=dict)
    structure: OutputStructure = "single"
    input_fingerprints: list[str] = Field(default_factory=list)
    output_arguments: bool = Field(
        False,
        description="kernel mode: the kernel returned nothing; its outputs are the arguments it stored into",
    )


class WorkerWarning(BaseModel):
    """A warning the untrusted code raised (numpy's RuntimeWarning on overflow, ...): reported,
    never a failure."""

    category: str = Field(max_length=100)
    message: str = Field(max_length=400)
    line: int | None = None


class WorkerResult(BaseModel):
    failure: WorkerFailure | None = None
    warnings: list[WorkerWarning] = Field(default_factory=list, max_length=5)
    runs: list[RunResult] = Field(default_factory=list)
    work: dict[str, float] | None = None
    has_trace: bool = False
    seconds: float = Field(0.0, description="wall time of the untrusted runs (benchmarks/worker_numeric.py)")
    cpu_seconds: float = Field(0.0, description="the same runs' CPU time: comparable on a loaded machine")
    probe: dict[str, Any] | None = Field(None, description="probe mode: the sandbox seen from inside")

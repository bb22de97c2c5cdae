"""Real sizes: check a kernel where checking is affordable, time it where it is used.

A reference module that offers a small size beside its full one (`SHAPES`, `task.offered_sizes`)
lets an evaluation at the full size be split in two runs of the same kernel text:

1. the *check run*, at the small size: outputs compared with the reference on the task's seeds,
   at a size drawn secretly when the module offers one small enough (`task.hidden_sizes`), and
   the trace verified by a trusted re-run on inputs the kernel never saw (`verification.py`);
2. the *timing run*, at the full size: trace-only (no numerics, the emulator's fast paths), so
   it costs what `accelopt profile --no-check` costs. Its outputs are not computed, so they are
   not checked, and its trace is not re-run. It must still be plausible for the full-size work
   (`plausibility.py`, applied by the backend to every profile), and it may only issue
   instructions the verified check run issued too (same source line, opcode, element types,
   engine, memories and operators: `InstructionSite`): a kernel that runs other code at the size
   it is timed at than at the size it is checked at, or the same code in a cheaper precision, is
   rejected;
3. the *mirror run*: the timing run's kind of run (trace-only, values unknown, a fresh worker) at
   the check size, beside the timing run. Its trace must be exactly the verified trace of the
   check run. A kernel can tell a trace-only run from a numeric one (a register loaded from a
   tile has no value there, storage is not allocated), and so could compute honestly where it is
   checked and skip work where it is timed; the mirror run shows that difference at a size where
   the honest trace is known. Only the shape then remains for a kernel to tell the timing run
   from the mirror run by (SECURITY.md "Real sizes").

The evaluation says which size was checked and which was timed (`Evaluation.checked_size`,
`timed_size`) and, in a note, what was verified where (SECURITY.md "Real sizes").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from accelopt.nki.rerun import compare_traces
from accelopt.nki.trace import Engine, Memory, Trace, TraceRecord
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import Evaluation
from accelopt.profiling.task import Size, Task, hidden_sizes, offered_sizes
from accelopt.profiling.work_scaling import work_shortfall


@dataclass(frozen=True)
class SizeSplit:
    """The two tasks of a split evaluation: `check` judges correctness, `timed` is profiled."""

    check: Task
    timed: Task


def check_size_of(task: Task) -> Size:
    """The size a task's outputs are checked at: the one it names, else the reference module's
    small size when the module offers one smaller than the task's (else the task's own)."""
    if task.check_size is not None:
        return task.check_size
    if task.kind != "reference" or task.size_argument == "none":
        return task.size
    offered = offered_sizes(task.reference_text or "")
    if task.size in offered and "small" in offered and offered["small"] < offered[task.size]:
        return "small"
    return task.size


def split_for(task: Task, options: EvaluationOptions) -> SizeSplit | None:
    """How a checked evaluation of `task` splits, or None when it checks and times one size."""
    if not options.check_correctness:
        return None
    size = check_size_of(task)
    if size == task.size:
        return None
    return SizeSplit(
        check=task.model_copy(update={"size": size, "check_size": None}),
        timed=task,  # evaluated without checking, so it is not split again
    )


class InstructionSite(NamedTuple):
    """What an instruction is, apart from how much data it covers: its source line and opcode,
    and everything the timing model prices besides the extent (element types, engine, memories,
    operators). A kernel may cover more or less data at another size; it may not switch to a
    cheaper kind of instruction there (bf16 for fp32, another engine) unseen, because the timed
    size's outputs are never computed."""

    line: int
    opcode: str
    engine: str
    dtype: str
    out_dtype: str
    src_memory: str
    dst_memory: str
    accumulate: bool
    is_transpose: bool
    operators: str

    def describe(self) -> str:
        ops = f" {self.operators}" if self.operators else ""
        return (
            f"{self.opcode}{ops} at line {self.line} ({self.dtype} -> {self.out_dtype}, {self.engine}, "
            f"{self.src_memory} -> {self.dst_memory})"
        )


# The record's `extra` keys that name what an instruction computes (not how much of it).
_OPERATOR_KEYS = ("api", "op", "op1", "reduce_op")


# An InstructionSite before it is made readable: what `_kind` computes per record.
_Kind = tuple[int, str, Engine, str, str, Memory | None, Memory | None, bool, bool, tuple[str | None, ...]]


def _kind(record: TraceRecord) -> _Kind:
    """What an `InstructionSite` describes, as a cheap hashable key (a full-size trace has ~100k
    records; a NamedTuple per record cost three times as much)."""
    extra = record.extra
    operators = tuple(str(extra[k]) if k in extra else None for k in _OPERATOR_KEYS)
    return (
        record.line,
        record.opcode,
        record.engine,
        record.dtype,
        record.out_dtype,
        record.src_memory,
        record.dst_memory,
        record.accumulate,
        record.is_transpose,
        operators,
    )


def _site(kind: _Kind) -> InstructionSite:
    """The readable form of a `_kind` key."""
    line, opcode, engine, dtype, out_dtype, src, dst, accumulate, is_transpose, operators = kind
    return InstructionSite(
        line=line,
        opcode=opcode,
        engine=engine.value,
        dtype=dtype,
        out_dtype=out_dtype,
        src_memory=src.value if src is not None else "-",
        dst_memory=dst.value if dst is not None else "-",
        accumulate=accumulate,
        is_transpose=is_transpose,
        operators=",".join(f"{k}={v}" for k, v in zip(_OPERATOR_KEYS, operators) if v is not None),
    )


def _kinds(trace: Trace) -> set[_Kind]:
    """Every kind of instruction a trace issues (`_kind`)."""
    return {_kind(record) for record in trace.records}


def instruction_sites(trace: Trace) -> set[InstructionSite]:
    """What kind of instruction, from which source line, a trace issues (`InstructionSite`)."""
    return {_site(kind) for kind in _kinds(trace)}


def unverified_sites(checked: Trace, timed: Trace) -> list[InstructionSite]:
    """The kinds of instruction the timing run issues that the verified check run never issued."""
    return sorted({_site(kind) for kind in _kinds(timed) - _kinds(checked)})


def input_shapes(trace: Trace | None) -> str:
    """The kernel's input shapes as a trace declares them, e.g. '256x1024, 1024x256'."""
    if trace is None:
        return ""
    shapes = input_shapes_by_name(trace).values()
    return ", ".join("x".join(str(d) for d in shape) or "scalar" for shape in shapes)


def input_shapes_by_name(trace: Trace) -> dict[str, list[int]]:
    """The kernel's inputs as a trace declares them: parameter name -> shape."""
    return {info.name: list(info.shape) for info in trace.tensors.values() if info.is_input}


def input_dtypes_by_name(trace: Trace) -> dict[str, str]:
    """The kernel's array inputs' element types as a trace declares them: parameter name -> dtype."""
    return {info.name: info.dtype for info in trace.tensors.values() if info.is_input and info.shape}


def _at(size: str, trace: Trace | None) -> str:
    shapes = input_shapes(trace)
    return f"the {size} size ({shapes})" if shapes else f"the {size} size"


def check_note(split: SizeSplit, evaluation: Evaluation, trace: Trace | None) -> str:
    """What the check run covered, in words."""
    hidden = hidden_sizes(split.check.reference_text or "", split.check.size)
    also = f" and at a size drawn secretly among: {', '.join(hidden)}" if hidden else ""
    return (
        f"correctness checked at {_at(split.check.size, trace)} on {len(evaluation.seeds)} seed(s){also}; "
        "its trace verified by a re-run on inputs the kernel never saw"
    )


def timing_note(split: SizeSplit, trace: Trace | None) -> str:
    return (
        f"timed at {_at(split.timed.size, trace)} by a trace-only run: outputs not computed there, "
        "trace not re-run; checked to be plausible for the full work and to issue only instructions "
        "the verified run issued, and the same kind of run at the checked size to emit the verified trace"
    )


def mirror_mismatch(checked_trace: Trace, mirror_trace: Trace) -> str | None:
    """None if the trace-only run at the check size emitted the verified trace; else the first
    difference, in words."""
    if len(mirror_trace.records) != len(checked_trace.records):
        return (
            f"it issues {len(mirror_trace.records)} instructions there, its verified run "
            f"{len(checked_trace.records)}"
        )
    difference = compare_traces(mirror_trace, checked_trace)
    return None if difference is None else difference.replace("the re-run's", "the verified run's")


def combined(
    split: SizeSplit,
    checked: Evaluation,
    checked_trace: Trace | None,
    timed: Evaluation,
    timed_trace: Trace | None,
    mirror: Evaluation | None = None,
    mirror_trace: Trace | None = None,
) -> Evaluation:
    """The evaluation of a split run: the check run's verdict and error, the timing run's
    profile; rejected when the timing run issued instructions the verified run did not, or when
    the trace-only run at the check size (`mirror`) is not the verified run's trace."""
    notes = [*checked.notes, *(n for n in timed.notes if n not in checked.notes)]
    sizes: dict[str, object] = {"checked_size": split.check.size, "timed_size": split.timed.size}
    if not timed.ok:
        message = f"at the {split.timed.size} size it is timed at (trace-only run): {timed.message}"
        return timed.model_copy(
            update={"message": message, "notes": notes, "max_error": checked.max_error, **sizes}
        )
    if mirror is not None and not mirror.ok:
        message = (
            f"a trace-only run at the {split.check.size} size, like the one it is timed by, fails where "
            f"its checked run did not: {mirror.message}"
        )
        return mirror.model_copy(
            update={"status": "rejected", "message": message, "profile": None, "notes": notes, **sizes}
        )
    if checked_trace is None or timed_trace is None or mirror is None or mirror_trace is None:
        return timed.model_copy(
            update={
                "status": "rejected",
                "message": "the timing run cannot be compared with the verified run: a trace is missing",
                "profile": None,
                "notes": notes,
                **sizes,
            }
        )
    difference = mirror_mismatch(checked_trace, mirror_trace)
    if difference is not None:
        return timed.model_copy(
            update={
                "status": "rejected",
                "message": f"at the {split.check.size} size a trace-only run (the kind of run it is timed by) "
                f"does other work than its verified run: {difference}; a kernel must do the same work whether "
                "or not its outputs are computed",
                "profile": None,
                "notes": notes,
                **sizes,
            }
        )
    extra = unverified_sites(checked_trace, timed_trace)
    if extra:
        shown = ", ".join(site.describe() for site in extra[:5])
        more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
        return timed.model_copy(
            update={
                "status": "rejected",
                "line": extra[0].line,
                "message": f"at the {split.timed.size} size the kernel issues instructions its verified run at "
                f"the {split.check.size} size never issued ({shown}{more}); a kernel must run the same code, "
                "in the same element types, at every size",
                "profile": None,
                "notes": notes,
                **sizes,
            }
        )
    shortfall = work_shortfall(
        checked.profile.work if checked.profile else None,
        timed.profile.work if timed.profile else None,
        checked_trace,
        timed_trace,
    )
    if shortfall is not None:
        return timed.model_copy(
            update={
                "status": "rejected",
                "message": f"at the {split.timed.size} size it is timed at, {shortfall}; a kernel must do the "
                "work its size asks for at every size",
                "profile": None,
                "notes": notes,
                **sizes,
            }
        )
    notes += [check_note(split, checked, checked_trace), timing_note(split, timed_trace)]
    return Evaluation(
        status="ok",
        message=timed.message,
        max_error=checked.max_error,
        seeds=checked.seeds,
        notes=notes,
        profile=timed.profile,
        verified=False,
        checked_size=split.check.size,
        timed_size=split.timed.size,
        timed_input_shapes=input_shapes_by_name(timed_trace),
        timed_input_dtypes=input_dtypes_by_name(timed_trace),
    )

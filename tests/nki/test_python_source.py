"""Every parse of the engine goes through one lock (CPython 3.11's ast conversion is not safe from
several threads at once, python/cpython#106905; nki/python_source.py)."""

from __future__ import annotations

import ast
import contextlib
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.nki import python_source

T = TypeVar("T")


def test_two_threads_are_never_inside_a_conversion_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    inside = 0
    most = 0
    count = threading.Lock()
    real_parse = ast.parse

    def slow_parse(text: str, **kwargs: object) -> ast.AST:
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.02)  # a thread switch in the middle of the conversion
        try:
            return real_parse(text, **kwargs)  # type: ignore[arg-type]
        finally:
            with count:
                inside -= 1

    monkeypatch.setattr(python_source.ast, "parse", slow_parse)
    threads = [threading.Thread(target=python_source.parse_module, args=(f"x = {i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1


def test_a_hook_that_parses_while_a_parse_is_under_way_does_not_wait_on_itself() -> None:
    # `ast.parse` raises a "compile" audit event before it converts; the sandbox guard's hook may
    # parse in turn on the same thread.
    outer = python_source.parse_module("y = 1")
    with python_source._CONVERSION:
        inner = python_source.parse_python("1 + 2", mode="eval")
    assert isinstance(outer, ast.Module) and isinstance(inner, ast.Expression)
    assert python_source.literal_value("(1, 2.5)") == (1, 2.5)


# What an audit hook saw: (filename, whether this thread held the parse lock, the stack) of every
# "compile" event raised by `ast.parse` (and so `ast.literal_eval`) while a test records.
# A hook cannot be removed, so it stays installed and records only while `_recording` is a list.
_recording: list[tuple[str, bool, list[str]]] | None = None


def _hook(event: str, args: tuple[object, ...]) -> None:
    if _recording is not None and event == "compile":
        import traceback

        frames = [f"{frame.filename}:{frame.name}" for frame in traceback.extract_stack()[:-1]]
        # Only a conversion to `ast` objects is at risk: `ast.parse` (which `ast.literal_eval`
        # calls); a plain compile() to bytecode (a typing.ForwardRef, a namedtuple) is not.
        if any(f.endswith("/ast.py:parse") for f in frames):
            _recording.append((str(args[1]), python_source._CONVERSION._is_owned(), frames))  # type: ignore[attr-defined]


sys.addaudithook(_hook)


@contextlib.contextmanager
def compiles() -> Iterator[list[tuple[str, bool, list[str]]]]:
    global _recording
    _recording = []
    try:
        yield _recording
    finally:
        _recording = None


def test_a_workers_arrays_are_read_under_the_lock_since_numpy_parses_each_header(tmp_path) -> None:
    from accelopt.profiling.sandbox import _load_arrays
    from accelopt.profiling.worker_protocol import WorkerResult

    path = tmp_path / "arrays.npz"
    np.savez(path, a=np.zeros((2, 3)), b=np.ones(4, dtype=np.float32))
    # the parent reads only the arrays the worker's result declares (sandbox.py)
    declared = WorkerResult.model_validate(
        {
            "runs": [
                {
                    "structure": "list",
                    "groups": {
                        "inputs": [
                            {"name": "a", "dtype": "float64", "shape": [2, 3]},
                            {"name": "b", "dtype": "float32", "shape": [4]},
                        ]
                    },
                }
            ]
        }
    )
    with compiles() as seen:
        loaded = threading_result(lambda: _load_arrays(path, declared))
    assert sorted(loaded) == ["a", "b"]
    assert len(seen) >= 2 and all(locked for _, locked, _ in seen)  # one header per array


def test_the_offline_rewrites_libcst_work_converts_nothing_outside_the_lock() -> None:
    # libcst's parser is native (no `ast`); only its `evaluated_value` properties call
    # `ast.literal_eval`. Every catalogue rewrite analyses, and applies its first site, on
    # compiler-style kernels full of string statements, numbers and keyword strings, in a
    # planner-like worker thread. (It fails when a rewrite reads `cst.SimpleString.evaluated_value`.)
    from accelopt.agents.offline.catalogue import all_sites, get_rewrite

    root = Path(__file__).resolve().parents[2]
    kernels = []
    for path in sorted((root / "tests" / "offline" / "kernels").glob("cg_*.py")):  # the compiler's style
        text = path.read_text()
        kernels += [(text, name) for name in re.findall(r"@nki\.jit[^\n]*\ndef (\w+)", text)]

    def work() -> int:
        applied = 0
        for text, name in kernels:
            first = {site.rewrite: site for site in reversed(all_sites(text, name))}  # one site per rewrite
            for site in first.values():
                try:
                    get_rewrite(site.rewrite).apply(text, name, site.id, dict(site.variants[0]))
                    applied += 1
                except NotApplicable:  # a refused variant is not what this test is about
                    pass
        return applied

    with compiles() as seen:
        applied = threading_result(work)
    ours = [
        (name, frames)
        for name, locked, frames in seen
        if not locked
        and any("libcst" in f or "accelopt" in f for f in frames)
        and not any("importlib" in f for f in frames)  # a module imported on first use (namedtuple)
    ]
    assert applied > 20
    assert ours == [], [f[-6:] for _, f in ours]


def threading_result(work: Callable[[], T]) -> T:
    """`work()` in another thread, as the offline planner runs, and its result."""
    out: list[T] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join()
    return out[0]

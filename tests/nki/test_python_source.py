"""Every parse of the engine goes through one lock (CPython 3.11's ast conversion is not safe from
several threads at once, python/cpython#106905; nki/python_source.py)."""

from __future__ import annotations

import ast
import threading
import time

import pytest

from accelopt.nki import python_source


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

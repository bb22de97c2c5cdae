"""The fixed-layout prefix (determinism.py) is probed inside the sandbox it will run in: a prefix
that starts an interpreter outside bubblewrap but not inside must not stop every worker."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from accelopt.profiling import determinism, isolation


def _sandboxed() -> isolation.Isolation:
    found = isolation.detect(sys.executable)
    if not found.kernel_enforced:
        pytest.fail(f"this machine runs the sandbox without OS isolation: {found.missing}")
    return found


def test_the_detected_sandbox_keeps_the_prefix_that_starts_an_interpreter_inside_it():
    found = _sandboxed()
    if not determinism.fixed_layout_prefix():
        pytest.fail("setarch -R does not work on this machine, so nothing here can be checked")
    assert found.fixed_layout, "setarch works here, yet the sandbox runs its workers without it"
    assert "-R" in found.fixed_layout


def test_a_prefix_that_works_outside_but_not_inside_is_dropped(tmp_path: Path, monkeypatch):
    found = _sandboxed()
    assert found.bwrap is not None
    # A wrapper that exists on the machine but not in the sandbox (its folder is not mounted
    # there): it starts a process outside, and cannot inside.
    wrapper = tmp_path / "wrap"
    wrapper.write_text('#!/bin/sh\nexec "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    assert subprocess.run([str(wrapper), "/bin/true"], check=False).returncode == 0
    monkeypatch.setattr(determinism, "inside_sandbox_prefix", lambda **_: [str(wrapper)])
    bare = isolation.Isolation(
        "namespaces",
        bwrap=found.bwrap,
        bwrap_as_nobody=found.bwrap_as_nobody,
        drops_root_inside=found.drops_root_inside,
    )
    assert isolation._with_fixed_layout(found.bwrap, sys.executable, bare) == bare

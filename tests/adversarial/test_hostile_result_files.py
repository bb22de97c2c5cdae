"""The result files a worker hands back, written by a worker in full control of its process (both
Python layers off, as if each had a hole): the parent reads them, so what they make it do is the
attacker's choice. Each must end as a `crashed` outcome with the reason, and quickly.

Before: the status file was read whole (up to the worker's 4 GiB file-size limit), and every
member of the array archive was inflated into the parent, declared or not; a deflated member of a
few KiB became as many gigabytes as its header claimed."""

from __future__ import annotations

import json

import pytest

from accelopt.profiling.sandbox import MAX_STATUS_BYTES, Sandbox
from accelopt.profiling.worker_protocol import ResourceLimits
from adversarial.unguarded import run_unguarded

ELEMENTS = 8 << 20  # 32 MiB of float32 zeros, a few KiB deflated


def declaring(names: list[str], elements: int = ELEMENTS) -> str:
    """A status file declaring one input array per name."""
    refs = [{"name": name, "dtype": "float32", "shape": [elements]} for name in names]
    return json.dumps({"runs": [{"structure": "list", "groups": {"inputs": refs}}]})


def writer(status: str, archive: str = "") -> str:
    """Module code that writes the result files itself and ends the worker before it writes its own."""
    return (
        "import os, zipfile\n"
        "import numpy as np\n"
        f"STATUS = {status!r}\n"
        "with open('../out/status.json', 'w') as f:\n"
        "    f.write(STATUS)\n"
        "with open('../out/arrays.npz', 'wb') as raw:\n"
        f"{archive or '    pass'}\n"
        "os._exit(0)\n"
    )


DEFLATED_MEMBER = (
    "    with zipfile.ZipFile(raw, 'w', compression=zipfile.ZIP_DEFLATED) as z:\n"
    "        with z.open('r0_in_0.npy', 'w', force_zip64=True) as m:\n"
    f"            np.lib.format.write_array(m, np.zeros({ELEMENTS}, np.float32))\n"
)
UNDECLARED_MEMBER = (
    "    with zipfile.ZipFile(raw, 'w') as z:\n"
    "        with z.open('r0_in_0.npy', 'w') as m:\n"
    "            np.lib.format.write_array(m, np.zeros(4, np.float32))\n"
    "        with z.open('extra.npy', 'w', force_zip64=True) as m:\n"
    f"            np.lib.format.write_array(m, np.zeros({ELEMENTS}, np.float32))\n"
)
HEADER_PROMISING_MORE = (
    "    with zipfile.ZipFile(raw, 'w') as z:\n"
    "        with z.open('r0_in_0.npy', 'w') as m:\n"
    "            np.lib.format.write_array_header_1_0(\n"
    f"                m, {{'descr': '<f4', 'fortran_order': False, 'shape': ({ELEMENTS},)}})\n"
    "            m.write(b'\\0' * 64)\n"
)


MANY_EMPTY_MEMBERS = (
    "    with zipfile.ZipFile(raw, 'w') as z:\n"
    "        for i in range(70000):\n"
    "            z.writestr(f'{i}', b'')\n"
)


@pytest.fixture
def sandbox(jobs_dir) -> Sandbox:
    return Sandbox(ResourceLimits(memory_bytes=1 << 30, cpu_seconds=30), work_root=jobs_dir)


def test_a_padded_status_file_is_not_read(sandbox):
    padded = declaring([]) + " " * (MAX_STATUS_BYTES + 1)
    outcome = run_unguarded(sandbox, writer(padded))
    assert outcome.kind == "crashed" and outcome.result is None
    assert "the status file is 4 MiB, more than the 4 MiB the parent reads" in outcome.message


@pytest.mark.parametrize(
    ("archive", "names", "reason"),
    [
        (DEFLATED_MEMBER, ["r0_in_0"], "array r0_in_0 is stored compressed"),
        (HEADER_PROMISING_MORE, ["r0_in_0"], "array r0_in_0 holds less data than its header says"),
        ("    raw.write(b'PK')", ["r0_in_0"], "the array archive is not a zip archive"),
        (MANY_EMPTY_MEMBERS, ["r0_in_0"], "the array archive lists 70000 members"),
    ],
    ids=["deflate-bomb", "header-promising-more", "truncated-archive", "directory-bomb"],
)
def test_an_archive_that_would_inflate_in_the_parent_is_refused(sandbox, archive, names, reason):
    outcome = run_unguarded(sandbox, writer(declaring(names), archive))
    assert outcome.kind == "crashed" and not outcome.arrays, outcome.message
    assert reason in outcome.message, outcome.message


def test_members_beyond_the_declared_ones_are_refused_unread(sandbox):
    outcome = run_unguarded(sandbox, writer(declaring(["r0_in_0"], 4), UNDECLARED_MEMBER))
    assert outcome.kind == "crashed" and not outcome.arrays, outcome.message  # the 32 MiB stayed in the file
    assert (
        "the array archive lists 2 members" in outcome.message and "the result declares 1" in outcome.message
    )

"""The runtime layers on their own: malicious kernels run in a real worker *without* the static
check (as if it had a hole), and the guard, limits and process boundary still hold.

The kernels reach forbidden things the way an attacker past the static check would: through
`np.ma.core.builtins` (numpy keeps a reference to the builtins module) or the classic
`().__class__.__bases__[0].__subclasses__()` walk."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.profiling.sandbox import Sandbox, WorkerOutcome
from accelopt.profiling.worker_protocol import WorkerJob
from profiling.kernels import PATH, body, line_of

BUILTINS = "B = np.ma.core.builtins\n"
OS_SYSTEM = (
    "w = [c for c in ().__class__.__bases__[0].__subclasses__() if c.__name__ == '_wrap_close'][0]\n"
    "run = w.__init__.__globals__['system']\n"
)


def kernel_text(code: str) -> str:
    return body(
        code
        + "\nout = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)"
        + "\nnl.store(out, value=nl.load(x))\nreturn out"
    )


def run_unchecked(sandbox: Sandbox, text: str) -> WorkerOutcome:
    x = np.ones((128, 256), np.float32)
    job = WorkerJob(
        mode="kernel",
        policy="kernel",
        source=text,
        source_path=PATH,
        kernel_name="double_kernel",
        inputs=[[Sandbox.input_ref("s0_0", x)]],
    )
    return sandbox.run_sync(sandbox.prepare(job, {"s0_0": x}), 60)


def assert_rejected(outcome: WorkerOutcome, reason: str) -> None:
    assert outcome.kind == "finished" and outcome.result is not None
    failure = outcome.result.failure
    assert failure is not None and failure.kind == "rejected", failure
    assert reason in failure.message


def test_writing_outside_the_sandbox(sandbox, tmp_path):
    canary = tmp_path / "canary.txt"
    text = kernel_text(BUILTINS + f"B.open({str(canary)!r}, 'w').write('pwned')")
    outcome = run_unchecked(sandbox, text)
    assert_rejected(outcome, f"writing '{canary}' is not allowed")
    assert outcome.result.failure.line == line_of(text, "B.open")
    assert not canary.exists()


def test_reading_a_file_through_a_trusted_helper(sandbox, tmp_path):
    """numpy is trusted code, but it is reading on the kernel's behalf: still refused."""
    secret = tmp_path / "secret.txt"
    secret.write_text("1 2 3")
    outcome = run_unchecked(sandbox, kernel_text(f"values = np.loadtxt({str(secret)!r})"))
    # Under OS isolation the file is not even there, and numpy's next try (as a URL) is refused.
    failure = outcome.result.failure if outcome.result else None
    assert failure is not None and failure.kind == "rejected", outcome
    assert f"reading '{secret}' is not allowed" in failure.message or "urllib" in failure.message


def test_shell_through_a_dunder_escape(sandbox, tmp_path):
    canary = tmp_path / "shell-canary"
    outcome = run_unchecked(sandbox, kernel_text(OS_SYSTEM + f"run('touch {canary}')"))
    assert_rejected(outcome, "operation 'os.system' is not allowed")
    assert not canary.exists()


@pytest.mark.parametrize("module", ["subprocess", "accelopt.nki.context"])
def test_imports_outside_the_allow_list(sandbox, module):
    assert_rejected(
        run_unchecked(sandbox, kernel_text(BUILTINS + f"B.__import__({module!r})")), f"'{module}'"
    )


def test_caught_violation_is_still_rejected_and_the_secret_does_not_leak(sandbox, monkeypatch):
    """The kernel swallows the refusal and tries to smuggle the secret out in its output."""
    monkeypatch.setenv("ACCELOPT_TEST_SECRET_TOKEN", "sk-do-not-leak")
    text = kernel_text(
        BUILTINS
        + "try:\n"
        + "    leaked = len(B.__import__('os').environ.get('ACCELOPT_TEST_SECRET_TOKEN', ''))\n"
        + "except Exception:\n"
        + "    leaked = 0\n"
    )
    outcome = run_unchecked(sandbox, text)
    assert_rejected(outcome, "import of 'os'")
    assert outcome.arrays == {}  # a rejected run returns no outputs at all


def test_eval_and_frames(sandbox):
    assert_rejected(run_unchecked(sandbox, kernel_text(BUILTINS + "B.eval('1 + 1')")), "'compile'")
    text = kernel_text("def g():\n    yield 1\nframe = g().gi_frame")
    assert_rejected(run_unchecked(sandbox, text), "object.__getattr__")


def test_monkey_patching_the_emulator_or_numpy(sandbox):
    assert_rejected(
        run_unchecked(sandbox, kernel_text("nl.multiply = nl.add")), "accelopt.nki.language.multiply"
    )
    assert_rejected(run_unchecked(sandbox, kernel_text("np.exp = np.log")), "'numpy.exp' was modified")
    text = kernel_text("np.ma.core.builtins.type(nl.load(x)).__add__ = None")
    assert_rejected(run_unchecked(sandbox, text), "Tensor.__add__")


# --- classes of escape the red team found past the Python layers --------------------------------

SYS = OS_SYSTEM.replace("run = w.__init__.__globals__['system']\n", "S = w.__init__.__globals__['sys']\n")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("<frozen evil>", "import of 'accelopt.profiling.guard' is not allowed"),  # not a frozen module
        ("<frozen os>", "compiling code under the trusted name"),  # a real one's name
        ("numpy-file", "compiling code under the trusted name"),
    ],
)
def test_no_trust_by_filename(sandbox, name, reason):
    """The kernel re-enters the kernel loader with code named like a frozen module or a numpy
    file, which used to count as trusted code: from there it imported the guard and switched it
    off. Compiling under a trusted name on untrusted code's behalf is refused."""
    evil = (
        "import accelopt.profiling.guard as g\n"
        "g._GUARD.active = False\n"
        "def evil():\n"
        "    return 0\n"
    )
    filename = "S.modules['numpy'].__file__" if name == "numpy-file" else repr(name)
    text = kernel_text(
        SYS
        + "rt = S.modules['accelopt.nki.runtime']\n"
        + f"rt.load_kernel({evil!r}, 'evil', {filename})\n"
        + "leak = S.modules['os'].listdir('/')\n"
    )
    assert_rejected(run_unchecked(sandbox, text), reason)


def test_pickle_find_class_is_checked_on_the_whole_stack(sandbox):
    """numpy (trusted) unpickles on the kernel's behalf; the class lookup used to be checked only
    against its immediate caller, numpy."""
    payload = b"cposix\nmkfifo\n(S'fifo'\ntR."
    text = kernel_text(SYS + f"np.load(S.modules['io'].BytesIO({payload!r}), allow_pickle=True)\n")
    assert_rejected(run_unchecked(sandbox, text), "pickle.find_class")


def test_operations_without_an_audit_event(sandbox):
    """`os.mknod`/`os.mkfifo` raise no audit event, and `sqlite3` writes files from C."""
    fifo = kernel_text(OS_SYSTEM.replace("['system']", "['mkfifo']") + "run('fifo')\n")
    assert_rejected(run_unchecked(sandbox, fifo), "creating device nodes or FIFOs is not allowed")
    database = kernel_text(SYS + "S.modules['importlib'].import_module('sqlite3').connect('x.db')\n")
    assert_rejected(run_unchecked(sandbox, database), "sqlite3")

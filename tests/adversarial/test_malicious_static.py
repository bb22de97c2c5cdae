"""Malicious candidates are refused by the static policy, with the reason and the line, before
any process starts."""

from __future__ import annotations

import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel
from profiling.kernels import HAND_WRITTEN, body, kernel, line_of

TASK = task_for_kernel(kernel(HAND_WRITTEN))

# (case, kernel body, the reason's tell-tale words, the offending fragment)
CASES = [
    ("write a file", "open('/tmp/accelopt-canary', 'w').write('x')", "'open' is not allowed", "open("),
    ("read a file", "secret = open('/etc/passwd').read()", "'open' is not allowed", "open("),
    ("read the environment", "import os\nkey = os.environ['OPENAI_API_KEY']", "import of 'os'", "import os"),
    ("environment through numpy", "key = np.ma.core.builtins", "'.builtins'", "builtins"),
    (
        "open a socket",
        "import socket\nsocket.create_connection(('1.1.1.1', 80))",
        "import of 'socket'",
        "import socket",
    ),
    (
        "spawn a process",
        "import subprocess\nsubprocess.run(['sh'])",
        "import of 'subprocess'",
        "import subprocess",
    ),
    ("fork bomb", "from os import fork\nwhile True:\n    fork()", "import from 'os'", "from os"),
    (
        "dunder escape",
        "classes = ().__class__.__bases__[0].__subclasses__()",
        "dunder attribute",
        "__class__",
    ),
    ("globals of a function", "g = nl.load.__globals__", "'.__globals__'", "__globals__"),
    ("generator frame", "def g():\n    yield 1\nframe = g().gi_frame", "'.gi_frame'", "gi_frame"),
    ("__import__", "m = __import__('os')", "'__import__'", "__import__"),
    (
        "importlib",
        "import importlib\nm = importlib.import_module('os')",
        "import of 'importlib'",
        "import importlib",
    ),
    ("eval", "eval('1 + 1')", "'eval'", "eval("),
    ("exec", "exec('import os')", "'exec'", "exec("),
    # a computed name passes the static check; the worker's guard refuses it when it is read
    ("getattr with a built name", "f = getattr(np, '_' * 2 + 'dict' + '_' * 2)", "getattr of '__dict__'", "getattr"),
    (
        "emulator internals",
        "import accelopt.nki.context",
        "import of 'accelopt.nki.context'",
        "import accelopt",
    ),
    (
        "private emulator names",
        "from neuronxcc.nki.language import _allocate",
        "importing '_allocate'",
        "_allocate",
    ),
    ("monkey-patch numpy", "np.exp = np.log", "no monkey-patching", "np.exp ="),
    ("monkey-patch the emulator", "nl.multiply = nl.add", "no monkey-patching", "nl.multiply ="),
    ("numpy file helpers", "np.save('/tmp/accelopt-canary', np.zeros(1))", "'.save'", "np.save"),
    (
        "match pattern reads a dunder",
        "match nl.load:\n    case object(__globals__=g):\n        pass",
        "match pattern",
        "case object",
    ),
    ("format field reads a dunder", "s = '{0.__globals__}'.format(nl.load)", "format field", "format("),
]


@pytest.mark.parametrize(("case", "code", "reason", "fragment"), CASES, ids=[c[0] for c in CASES])
async def test_static_policy_rejects(case, code, reason, fragment):
    text = body(code + "\nout = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\nreturn out")
    backend = SimulatorBackend()
    evaluation = await backend.evaluate(kernel(text), TASK, EvaluationOptions(seeds=1))
    assert evaluation.status == "rejected", (case, evaluation.message)
    assert reason in evaluation.message
    assert evaluation.line == line_of(text, fragment)
    assert not backend.sandbox.live_pids

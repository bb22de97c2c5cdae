"""A fake speedup served by a model endpoint must not win `accelopt optimize`.

The red team pointed `optimize` at an endpoint whose executor answered with a kernel that does
the work and then deletes its own trace records: it looked many times faster, was ranked best,
written to best.py and summarized into a lesson in the memory. Here the real command runs
against a loopback chat server serving that kernel; the candidate must come back `rejected`,
best.py must stay the baseline and the memory may learn only that the plan was rejected.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

for _helpers in ("llm", "search"):
    _path = str(Path(__file__).resolve().parents[1] / _helpers)
    if _path not in sys.path:
        sys.path.insert(0, _path)

from chat_server import ChatRequest, Reply  # noqa: E402
from scripted_endpoint import WIDEN, ScriptedEndpoint, code, lesson_reply  # noqa: E402
from search_fixtures import chat_server  # noqa: E402,F401 - the loopback endpoint fixture
from silu_variants import BASELINE, silu  # noqa: E402

from accelopt.cli import main  # noqa: E402
from accelopt.profiling.evaluation import KernelSource  # noqa: E402
from accelopt.search.events import CandidateEvent, Finished, search_event_adapter  # noqa: E402
from accelopt.search.memory import Memory  # noqa: E402

# The wide SiLU (honest work), then every record but the first deleted from the trace.
CHEAT = silu(512).replace(
    "    return out\n",
    "    match nl:\n"
    "        case object(_current=current):\n"
    "            del current().trace.records[1:]\n"
    "    return out\n",
)


def serve_the_cheat(role: str, request: ChatRequest) -> Reply:
    if role == "planner":
        return Reply(content=json.dumps(WIDEN))
    if role in ("executor", "fixer"):
        return code(CHEAT)
    return lesson_reply()


def same(text: str, other: str) -> bool:
    return (
        KernelSource(text=text, name="silu_kernel").normalized_hash()
        == KernelSource(text=other, name="silu_kernel").normalized_hash()
    )


def test_a_fake_speedup_is_not_ranked_written_or_learned(chat_server, tmp_path: Path):  # noqa: F811
    server = chat_server(ScriptedEndpoint(serve_the_cheat))
    kernel_file = tmp_path / "silu_small.py"
    kernel_file.write_text(BASELINE)
    memory_path = tmp_path / "memory.sqlite"
    config = tmp_path / "accelopt.toml"
    config.write_text(
        f'agents = "llm"\nmemory = "{memory_path}"\n'
        f'[llm]\nbase_url = "{server.base_url}"\nmodel = "test-model"\ntimeout_s = 5\n'
        '[llm.prices."test-model"]\nprompt_per_million = 3.0\ncompletion_per_million = 15.0\n'
        "[search]\nfix_attempts = 0\n"
    )
    out = tmp_path / "out"
    arguments = ["optimize", str(kernel_file), "--config", str(config), "--seeds", "2", "--out", str(out)]
    assert main([*arguments, "-T", "1", "-B", "1", "-N", "1", "-K", "1"]) == 0

    events = [search_event_adapter.validate_json(line) for line in (out / "events.jsonl").read_text().splitlines()]
    cheats = [
        e.candidate for e in events if isinstance(e, CandidateEvent) and same(e.candidate.kernel.text, CHEAT)
    ]
    assert cheats, "the endpoint's kernel was never evaluated"
    for candidate in cheats:
        assert candidate.status == "rejected", (candidate.status, candidate.message)
        # The static policy now refuses the class pattern that reached the trace; the trusted
        # re-run would refuse the tampered trace (tests/adversarial/test_trace_attacks.py).
        assert candidate.message.startswith(("verification: ", "sandbox policy: ")), candidate.message
        assert candidate.speedup is None
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert all(not same(r.candidate.kernel.text, CHEAT) for r in finished.ranked if r.candidate.status == "ok")
    assert same((out / "best.py").read_text(), BASELINE)
    with Memory(memory_path) as memory:
        # At most the search's negative note that the plan was rejected; never a speedup.
        for experience in memory.list():
            assert experience.speedup < 1 and not experience.lesson.positive, experience

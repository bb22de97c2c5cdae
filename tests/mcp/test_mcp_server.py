"""`accelopt mcp` end to end: the SDK's real client (`ClientSession` over `stdio_client`) talking
to the server started as a subprocess. Inputs are the small shapes of the example kernels."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import anyio
import pytest
from mcp_client import EXAMPLES, error_text, mcp_session, structured

from accelopt.hardware.specs import HARDWARE_NAMES
from accelopt.mcp.edits import apply_line_edits
from accelopt.profiling.profile import BOUND_WORDS

TOOLS = {
    "profile_kernel",
    "check_kernel",
    "optimize_kernel",
    "get_search",
    "get_candidate",
    "memory_search",
    "list_targets",
}

# A kernel that breaks an NKI rule: a tile may span at most 128 partitions.
TOO_MANY_PARTITIONS = """\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: inputs x=float32[256,64]
@nki.jit
def copy_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x[0:256, 0:64])
    nl.store(out[0:256, 0:64], value=tile)
    return out
"""
VIOLATION_LINE = 9  # the nl.load of 256 rows


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite"


@pytest.fixture
def silu(tmp_path: Path) -> Path:
    """A copy of the SiLU example (and its reference) the test can check is never written."""
    folder = tmp_path / "kernels"
    folder.mkdir()
    for name in ("silu.py", "silu_ref.py"):
        shutil.copy(EXAMPLES / name, folder / name)
    return folder / "silu.py"


async def test_tools_and_resources_are_listed_with_their_schemas(memory: Path) -> None:
    async with mcp_session(memory) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(listed) == TOOLS
        for tool in listed.values():
            assert tool.description, tool.name
            assert tool.output_schema is not None and tool.output_schema.get("properties"), tool.name
        profile_inputs = listed["profile_kernel"].input_schema["properties"]
        assert {"path", "source", "kernel", "hardware", "check", "reference", "size"} <= set(profile_inputs)
        assert "trn2" in str(profile_inputs["hardware"])
        profile_outputs = listed["profile_kernel"].output_schema["properties"]
        assert {"status", "correctness", "profile"} <= set(profile_outputs)
        optimize_inputs = listed["optimize_kernel"].input_schema["properties"]
        assert {"iterations", "beam_width", "plans_per_kernel", "samples_per_plan", "max_evaluations"} <= set(
            optimize_inputs
        )
        assert listed["profile_kernel"].annotations.read_only_hint is True

        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        assert {f"accelopt://hardware/{name}" for name in HARDWARE_NAMES} | {
            "accelopt://notes/nki-rules"
        } <= uris
        rules = (await session.read_resource("accelopt://notes/nki-rules")).contents[0].text
        assert (
            "err_num_partition_exceed_arch_limit" in rules and "err_unexpected_output_dependencies" in rules
        )
        sheet = (await session.read_resource("accelopt://hardware/trn2")).contents[0].text
        assert sheet.startswith("# trn2") and "Roofline" in sheet

        targets = structured(await session.call_tool("list_targets", {}))
        by_name = {t["name"]: t for t in targets["targets"]}
        assert set(by_name) == set(HARDWARE_NAMES) >= {"trn1", "trn2"}
        assert by_name["trn1"]["partitions"] == 128
        assert by_name["trn1"]["tensor_clock_ghz"] == pytest.approx(2.8)
        assert targets["default_backend"] == "simulator"


async def test_profile_of_an_example_kernel(memory: Path, silu: Path) -> None:
    lines = silu.read_text().splitlines()
    async with mcp_session(memory) as session:
        result = structured(await session.call_tool("profile_kernel", {"path": str(silu)}))
        assert result["status"] == "ok" and result["kernel_name"] == "silu_kernel"
        assert result["correctness"]["checked"] and result["correctness"]["correct"] is True
        assert result["correctness"]["seeds"] >= 1
        profile = result["profile"]
        assert profile["backend_label"] == "simulated on trn1"
        assert profile["latency_us"] > 0 and profile["roofline_peak_latency_us"] > 0
        # percent of peak is a percentage: peak / latency x 100
        expected = 100 * profile["roofline_peak_latency_us"] / profile["latency_us"]
        assert profile["percent_of_peak"] == pytest.approx(expected, rel=1e-2)
        assert 0 < profile["percent_of_peak"] <= 100
        assert profile["bound"] in BOUND_WORDS.values()
        assert set(profile["engine_busy"]) == {
            "tensor_percent",
            "vector_percent",
            "scalar_percent",
            "gpsimd_percent",
            "dma_percent",
        }
        assert profile["engine_busy"]["dma_percent"] > 0
        costliest = profile["costliest_lines"]
        assert costliest and costliest == sorted(costliest, key=lambda c: -c["busy_us"])
        for cost in costliest:
            assert lines[cost["line"] - 1].strip() == cost["source"]

        # the same kernel for the other generation, from its text, profile only
        other = structured(
            await session.call_tool(
                "profile_kernel",
                {"source": silu.read_text(), "path": str(silu), "hardware": "trn2", "check": False},
            )
        )
        assert other["profile"]["backend_label"] == "simulated on trn2"
        assert other["correctness"]["checked"] is False and other["correctness"]["correct"] is None
        assert other["profile"]["latency_us"] != profile["latency_us"]


async def test_check_reports_a_broken_rule_at_its_line(memory: Path, silu: Path) -> None:
    async with mcp_session(memory) as session:
        broken = structured(await session.call_tool("check_kernel", {"source": TOO_MANY_PARTITIONS}))
        assert broken["passed"] is False and broken["status"] == "compile_error"
        [diagnostic] = broken["diagnostics"]
        assert diagnostic["code"] == "err_num_partition_exceed_arch_limit"
        assert diagnostic["line"] == VIOLATION_LINE
        assert diagnostic["source"] == "tile = nl.load(x[0:256, 0:64])"
        assert diagnostic["severity"] == "error"

        fixed = TOO_MANY_PARTITIONS.replace("256,64", "128,64").replace("0:256", "0:128")
        good = structured(await session.call_tool("check_kernel", {"source": fixed}))
        assert good["passed"] is True and good["diagnostics"] == []

        checked = structured(await session.call_tool("check_kernel", {"path": str(silu), "seeds": 2}))
        assert checked["passed"] is True
        assert checked["correctness"]["correct"] is True and checked["correctness"]["seeds"] == 2
        assert checked["correctness"]["max_relative_error"] < checked["correctness"]["tolerance"]
        assert "silu_ref.py" in checked["correctness"]["reference"]

        # a kernel whose outputs are wrong: correct is False, no rule diagnostic
        wrong = silu.read_text().replace("nl.multiply(tile, gate)", "nl.add(tile, gate)")
        verdict = structured(
            await session.call_tool("check_kernel", {"source": wrong, "path": str(silu), "seeds": 1})
        )
        assert verdict["passed"] is False and verdict["status"] == "incorrect"
        assert verdict["correctness"]["correct"] is False and verdict["diagnostics"] == []
        assert "error" in verdict["message"], verdict["message"]


async def test_small_offline_optimize_reports_progress_and_returns_edits(memory: Path, silu: Path) -> None:
    original = silu.read_text()
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with mcp_session(memory) as session:
        result = structured(
            await session.call_tool(
                "optimize_kernel",
                {
                    "path": str(silu),
                    "agents": "offline",
                    "iterations": 1,
                    "beam_width": 1,
                    # four proposals: on the small SiLU example the first two (a wider tile, a
                    # fused activation) can both come out even in the timing model
                    "plans_per_kernel": 4,
                    "samples_per_plan": 1,
                    "seeds": 1,
                },
                progress_callback=on_progress,
            )
        )
        assert result["reason"] == "completed" and result["running"] is False
        assert result["agents"] == "offline" and result["backend_label"] == "simulated on trn1"
        assert result["evaluations"] >= 2
        candidates = result["candidates"]
        assert candidates, result
        assert [c["rank"] for c in candidates] == list(range(1, len(candidates) + 1))
        assert candidates == sorted(candidates, key=lambda c: -c["speedup"])
        best = candidates[0]
        assert best["speedup"] > 1.0 and best["rationale"] and best["title"], candidates
        assert best["diff"].startswith("--- ") and "\n+" in best["diff"]
        assert result["best_speedup"] == pytest.approx(best["speedup"], rel=1e-3)

        # progress: several notifications, strictly increasing, ending at the total
        assert len(progress) >= 3, progress
        values = [value for value, _, _ in progress]
        assert values == sorted(set(values)), values
        assert progress[-1][0] == progress[-1][1] == 1.0
        assert "finished (completed)" in (progress[-1][2] or "")
        assert all(value < 1.0 for value in values[:-1])
        assert all(result["search_id"] in (message or "") for _, _, message in progress)

        detail = structured(
            await session.call_tool(
                "get_candidate", {"search_id": result["search_id"], "candidate_id": best["id"]}
            )
        )
        assert detail["rank"] == 1 and detail["speedup"] == pytest.approx(best["speedup"], rel=1e-3)
        assert detail["profile"]["backend_label"] == "simulated on trn1"
        assert detail["profile"]["latency_us"] == pytest.approx(best["latency_us"], rel=1e-3)
        assert apply_line_edits(original, _edits(detail["edits"])) == detail["text"]
        assert detail["text"] != original

        # the search wrote its lessons to the memory; memory_search finds them for this kernel
        lessons = structured(await session.call_tool("memory_search", {"path": str(silu)}))
        assert lessons["memory"] == str(memory)
        assert lessons["total_experiences"] == result["lessons_learned"] > 0
        assert any(lesson["positive"] and lesson["kernel_family"] == "silu" for lesson in lessons["lessons"])

    assert silu.read_text() == original  # the server returned edits; it wrote nothing


async def test_cancelling_mid_search_stops_it_and_the_server_keeps_serving(memory: Path) -> None:
    first_candidate = anyio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if value > 0.05:  # past the original kernel: evaluations of candidates are under way
            first_candidate.set()

    async with mcp_session(memory) as session:
        answered: list[object] = []

        async def optimize() -> None:
            answered.append(
                await session.call_tool(
                    "optimize_kernel",
                    {
                        "path": str(EXAMPLES / "matmul.py"),
                        "agents": "offline",
                        "iterations": 8,
                        "beam_width": 2,
                        "plans_per_kernel": 4,
                        "samples_per_plan": 1,
                        "seeds": 1,
                    },
                    progress_callback=on_progress,
                )
            )

        async with anyio.create_task_group() as group:
            group.start_soon(optimize)
            with anyio.fail_after(60):
                await first_candidate.wait()
            group.cancel_scope.cancel()  # the SDK sends notifications/cancelled
        cancelled_at = time.monotonic()
        assert answered == []

        with anyio.fail_after(60):
            while True:
                state = structured(await session.call_tool("get_search", {}))
                if not state["running"]:
                    break
                await anyio.sleep(0.1)
        stopped_after = time.monotonic() - cancelled_at
        assert state["reason"] == "cancelled", state
        assert stopped_after < 30
        planned = 1 + 8 * 2 * 4  # the original kernel + iterations x beam x plans
        assert state["evaluations"] < planned
        assert state["baseline_latency_us"] > 0

        targets = structured(await session.call_tool("list_targets", {}))
        assert targets["targets"]


async def test_bad_input_is_a_tool_error_and_the_server_keeps_serving(memory: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(TOO_MANY_PARTITIONS.replace("def copy_kernel(x):", "def copy_kernel(x:"))
    missing_reference = tmp_path / "orphan.py"
    missing_reference.write_text(
        (EXAMPLES / "silu.py").read_text().replace("reference silu_ref.py", "reference nowhere_ref.py")
    )
    directive_line = next(
        number
        for number, line in enumerate(missing_reference.read_text().splitlines(), start=1)
        if "nowhere_ref.py" in line
    )
    async with mcp_session(memory) as session:
        syntax = error_text(await session.call_tool("profile_kernel", {"path": str(broken)}))
        assert f"{broken}:7" in syntax and "syntax error" in syntax

        unknown = error_text(
            await session.call_tool(
                "check_kernel", {"path": str(EXAMPLES / "silu.py"), "kernel": "gelu_kernel"}
            )
        )
        assert "gelu_kernel" in unknown and "silu_kernel" in unknown and "silu.py" in unknown

        reference = error_text(await session.call_tool("profile_kernel", {"path": str(missing_reference)}))
        assert f"{missing_reference}:{directive_line}" in reference and "nowhere_ref.py" in reference

        no_inputs = error_text(
            await session.call_tool(
                "optimize_kernel", {"source": TOO_MANY_PARTITIONS.replace("# accelopt: inputs", "#")}
            )
        )
        assert "no way to get inputs" in no_inputs and "<source>:6" in no_inputs

        nothing = error_text(await session.call_tool("profile_kernel", {}))
        assert "path" in nothing and "source" in nothing

        no_file = error_text(await session.call_tool("memory_search", {"path": str(tmp_path / "absent.py")}))
        assert "absent.py: no such file" in no_file

        no_search = error_text(await session.call_tool("get_candidate", {"search_id": "feedbeef"}))
        assert "feedbeef" in no_search

        invalid = error_text(
            await session.call_tool("optimize_kernel", {"path": str(broken), "iterations": 0})
        )
        assert "iterations" in invalid

        # after every error, a good call still succeeds
        fine = structured(
            await session.call_tool("profile_kernel", {"path": str(EXAMPLES / "silu.py"), "check": False})
        )
        assert fine["status"] == "ok" and fine["profile"]["latency_us"] > 0


def _edits(raw: list[dict]) -> list:
    from accelopt.mcp.models import KernelEdit

    return [KernelEdit.model_validate(edit) for edit in raw]

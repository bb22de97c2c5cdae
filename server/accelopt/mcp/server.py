"""`accelopt mcp`: the tools and resources, on the official MCP SDK (`MCPServer`).

Each tool turns its arguments into the engine's inputs (`kernels.py`), calls the engine (a
backend's `evaluate`, the beam search, the memory, the hardware specs) and returns the engine's
answer as a pydantic model (the tool's output schema). Bad input is a `ToolError`: the client
gets `isError` with a message naming the file and line, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ToolAnnotations
from pydantic import Field, ValidationError

from accelopt.mcp.arguments import describe_invalid_arguments
from accelopt.mcp.edits import line_edits, unified_diff
from accelopt.mcp.kernels import KernelInputError, build_task, load_kernel
from accelopt.mcp.models import (
    CandidateDetail,
    CheckResult,
    Hardware,
    LessonInfo,
    MemoryResult,
    OptimizeResult,
    ProfileResult,
    TargetsResult,
)
from accelopt.mcp.pagination import refuse_foreign_cursors
from accelopt.mcp.reports import backend_label, correctness, diagnostics, profile_report
from accelopt.mcp.searches import Searches
from accelopt.mcp.settings import McpSettings
from accelopt.mcp.targets import TARGETS, spec_sheet, spec_sheet_uri, target_info
from accelopt.mcp.versions import fit_to_negotiated_version, progress_message
from accelopt.profiling.backend import Backend, EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.profiling.task import Task

log = logging.getLogger(__name__)

# How long closing the searches and backends at shutdown may take (a search winding down waits
# for its evaluations in flight; the backend then kills what is left).
SHUTDOWN_GRACE_S = 30.0
NKI_RULES_URI = "accelopt://notes/nki-rules"
INSTRUCTIONS = (
    "AccelOpt profiles, checks and optimizes NKI kernels for AWS Trainium without hardware: a "
    "NeuronCore simulator (numbers labelled 'simulated on trn1/trn2'), the NKI rule checker and an "
    "agent beam search. Start with profile_kernel (latency, percent of roofline peak, what bounds "
    "it, the costliest lines), fix rule violations with check_kernel, then optimize_kernel with a "
    "small budget. The server never writes files: apply a candidate's edits yourself."
)

# Arguments shared by the tools that take a kernel.
PathArg = Annotated[
    str | None,
    Field(description="the kernel's .py file; with `source` too, the file that text belongs to"),
]
SourceArg = Annotated[
    str | None,
    Field(description="the module's source text (e.g. an unsaved buffer); read from `path` if omitted"),
]
KernelArg = Annotated[str | None, Field(description="the @nki.jit function; default: the first in the file")]
ReferenceArg = Annotated[
    str | None,
    Field(
        description="reference module path; default: the `# accelopt: reference ...` directive above the kernel"
    ),
]
SizeArg = Annotated[
    Literal["full", "small"] | None,
    Field(description="input shapes of the reference module (small is quicker); default: the server's"),
]
HardwareArg = Annotated[
    Hardware | None, Field(description="Trainium generation; default: the server's (trn1)")
]
SeedsArg = Annotated[int | None, Field(ge=1, le=50, description="random inputs the outputs are compared on")]

_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


class AccelOptServer(MCPServer[Any]):
    """The SDK's server, with arguments that fail a tool's input schema told per argument
    (accelopt.mcp.arguments) instead of as pydantic's report, and unknown names as the protocol
    errors the specification names (server/tools and server/prompts, "Error Handling": -32602),
    where the SDK answers a tool result (`isError`) or error code 0."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if self._tool_manager.get_tool(name) is None:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}", {"name": name})
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # Only the SDK's own argument check: a crash inside a tool stays the SDK's UnexpectedToolError.
            if isinstance(exc.__cause__, ValidationError) and not isinstance(exc, UnexpectedToolError):
                raise ToolError(describe_invalid_arguments(name, exc.__cause__)) from exc.__cause__
            raise

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Any = None
    ) -> Any:
        if self._prompt_manager.get_prompt(name) is None:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {name}", {"name": name})
        return await super().get_prompt(name, arguments, context)


class AccelOptTools:
    """The state behind the tools: the settings, one backend for profiles and checks (created in
    the serving event loop, closed at shutdown) and the searches."""

    def __init__(self, settings: McpSettings) -> None:
        self.settings = settings
        self.searches = Searches(settings)
        self._backend: Backend | None = None

    def backend(self) -> Backend:
        if self._backend is None:
            from accelopt.profiling.backends import get_backend

            try:
                self._backend = get_backend(
                    self.settings.run.backend, max_workers=self.settings.profile_workers
                )
            except (ValueError, RuntimeError) as exc:
                raise ToolError(f"backend {self.settings.run.backend!r}: {exc}") from exc
        return self._backend

    def hardware(self, requested: str | None) -> str:
        return requested or self.settings.run.search.hardware

    async def kernel_and_task(
        self,
        path: str | None,
        source: str | None,
        kernel: str | None,
        reference: str | None,
        size: str | None,
    ) -> tuple[KernelSource, Task]:
        try:
            found = await asyncio.to_thread(load_kernel, path, source, kernel)
            task = await asyncio.to_thread(build_task, found, reference, size or self.settings.size)  # type: ignore[arg-type]
        except KernelInputError as exc:
            raise ToolError(str(exc)) from None
        return found, task

    async def evaluate(
        self, kernel: KernelSource, task: Task, hardware: str, check: bool, seeds: int | None
    ) -> Evaluation:
        options = EvaluationOptions(
            hardware=hardware,  # type: ignore[arg-type]
            seeds=seeds or self.settings.run.search.seeds,
            timeout_s=self.settings.profile_timeout_s,
            check_correctness=check,
        )
        return await self.backend().evaluate(kernel, task, options)

    async def aclose(self) -> None:
        await self.searches.aclose()
        if self._backend is not None:
            backend, self._backend = self._backend, None
            await backend.aclose()


def build_server(settings: McpSettings, closed: anyio.Event | None = None) -> MCPServer[Any]:
    """`closed`, when given, is set once the lifespan has stopped the searches and the backends."""
    tools = AccelOptTools(settings)

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        warming = asyncio.create_task(asyncio.to_thread(_warm_imports))
        try:
            yield None
        finally:
            # Shielded: the serving loop may end by cancellation (SIGTERM on stdio, the HTTP
            # server stopping), and the searches' workers must still be stopped.
            with anyio.move_on_after(SHUTDOWN_GRACE_S, shield=True):
                await tools.aclose()
                await asyncio.gather(warming, return_exceptions=True)
            if closed is not None:
                closed.set()

    server = AccelOptServer(
        "accelopt",
        title="AccelOpt",
        instructions=INSTRUCTIONS,
        version=_version(),
        lifespan=lifespan,
        log_level="WARNING",
        middleware=[fit_to_negotiated_version, refuse_foreign_cursors],
    )

    @server.tool(
        title="Profile an NKI kernel",
        description=(
            "Run an NKI kernel on AccelOpt's NeuronCore simulator and report its latency, the roofline "
            "peak latency for its work, percent of peak (above 100 only for fused vector work), what bounds it in words, how busy each "
            "engine is and the costliest source lines. With check=true (default) the outputs are also "
            "compared with the reference on random inputs."
        ),
        annotations=_READ_ONLY,
    )
    async def profile_kernel(
        path: PathArg = None,
        source: SourceArg = None,
        kernel: KernelArg = None,
        reference: ReferenceArg = None,
        hardware: HardwareArg = None,
        size: SizeArg = None,
        check: Annotated[
            bool, Field(description="also check correctness (false: profile only, faster)")
        ] = True,
        seeds: SeedsArg = None,
    ) -> ProfileResult:
        found, task = await tools.kernel_and_task(path, source, kernel, reference, size)
        evaluation = await tools.evaluate(found, task, tools.hardware(hardware), check, seeds)
        return ProfileResult(
            kernel_name=found.name,
            path=found.path,
            status=evaluation.status,
            message=evaluation.message,
            line=evaluation.line,
            correctness=correctness(evaluation, task, check),
            profile=profile_report(evaluation.profile) if evaluation.profile is not None else None,
        )

    @server.tool(
        title="Check an NKI kernel",
        description=(
            "Check an NKI kernel against the NKI rules the emulator enforces (diagnostics with the error "
            "code and line) and its outputs against the reference on random inputs."
        ),
        annotations=_READ_ONLY,
    )
    async def check_kernel(
        path: PathArg = None,
        source: SourceArg = None,
        kernel: KernelArg = None,
        reference: ReferenceArg = None,
        hardware: HardwareArg = None,
        size: SizeArg = None,
        seeds: SeedsArg = None,
    ) -> CheckResult:
        found, task = await tools.kernel_and_task(path, source, kernel, reference, size)
        chip = tools.hardware(hardware)
        evaluation = await tools.evaluate(found, task, chip, True, seeds)
        verdict = correctness(evaluation, task, True)
        return CheckResult(
            kernel_name=found.name,
            path=found.path,
            passed=evaluation.status == "ok",
            status=evaluation.status,
            message=evaluation.message,
            diagnostics=diagnostics(evaluation, found),
            correctness=verdict,
            backend_label=(
                evaluation.profile.label if evaluation.profile else backend_label(tools.backend().name, chip)
            ),
        )

    @server.tool(
        title="Optimize an NKI kernel",
        description=(
            "Start AccelOpt's beam search on a kernel: planner and executor agents propose rewrites, every "
            "candidate is checked against the reference and profiled on the simulator. Reports progress "
            "notifications and can be cancelled (the search then stops; get_search reads what it found). "
            "Returns the ranked correct candidates with their diffs and the plans behind them. Keep the "
            "budget small for an interactive answer (e.g. iterations=2, beam_width=2, plans_per_kernel=4, "
            "samples_per_plan=1). Nothing is written to the user's files."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    )
    async def optimize_kernel(
        ctx: Context,
        path: PathArg = None,
        source: SourceArg = None,
        kernel: KernelArg = None,
        reference: ReferenceArg = None,
        hardware: HardwareArg = None,
        size: SizeArg = None,
        agents: Annotated[
            Literal["auto", "offline", "llm"] | None,
            Field(description="offline rewrites, LLM agents (needs the server's [llm] endpoint), or auto"),
        ] = None,
        iterations: Annotated[int | None, Field(ge=1, le=64, description="T: search iterations")] = None,
        beam_width: Annotated[
            int | None, Field(ge=1, le=32, description="B: kernels kept per iteration")
        ] = None,
        plans_per_kernel: Annotated[
            int | None, Field(ge=1, le=64, description="N: plans per beam kernel")
        ] = None,
        samples_per_plan: Annotated[
            int | None, Field(ge=1, le=8, description="K: kernels written per plan")
        ] = None,
        seeds: SeedsArg = None,
        max_evaluations: Annotated[
            int | None, Field(ge=1, description="stop after this many evaluations")
        ] = None,
        wall_time_s: Annotated[float | None, Field(gt=0, description="stop after this many seconds")] = None,
        budget_usd: Annotated[
            float | None, Field(ge=0, description="stop when LLM calls cost this much")
        ] = None,
        patience: Annotated[
            int | None, Field(ge=1, description="stop after this many iterations without a faster kernel")
        ] = None,
        seed: Annotated[int | None, Field(description="seed for the agents' choices")] = None,
        max_candidates: Annotated[int, Field(ge=1, le=50, description="candidates in the answer")] = 5,
    ) -> OptimizeResult:
        found, task = await tools.kernel_and_task(path, source, kernel, reference, size)
        base = settings.run.search
        overrides: dict[str, Any] = {
            "iterations": iterations,
            "beam_width": beam_width,
            "plans_per_kernel": plans_per_kernel,
            "samples_per_plan": samples_per_plan,
            "seeds": seeds,
            "hardware": hardware,
            "patience": patience,
            "seed": seed,
        }
        budget = base.budget.model_dump()
        for key, value in (
            ("max_evaluations", max_evaluations),
            ("max_wall_time_s", wall_time_s),
            ("max_dollars", budget_usd),
        ):
            if value is not None:
                budget[key] = value
        try:
            config = type(base).model_validate(
                {
                    **base.model_dump(),
                    **{k: v for k, v in overrides.items() if v is not None},
                    "budget": budget,
                    "search_id": None,
                }
            )
        except ValidationError as exc:
            raise ToolError(describe_invalid_arguments("optimize_kernel", exc)) from None
        try:
            run = await tools.searches.start(found, task, config, agents or settings.run.agents)
        except KernelInputError as exc:
            raise ToolError(str(exc)) from None
        steps = run.follow()
        first = run.progress()
        try:
            version = ctx.protocol_version
            if first is not None:
                await ctx.report_progress(first[0], first[1], progress_message(version, first[2]))
            async for done, total, message in steps:
                await ctx.report_progress(done, total, progress_message(version, message))
            if run.task is not None:
                await asyncio.shield(run.task)
        except asyncio.CancelledError:
            # notifications/cancelled (or the client went away): ask the search to stop; it winds
            # down in its own task and keeps its ranking for get_search / get_candidate.
            run.cancel.set()
            raise
        return run.result(max_candidates)

    @server.tool(
        title="A search's state and ranking",
        description=(
            "The state and ranked candidates of a search started by optimize_kernel (running, finished or "
            "cancelled). Without search_id: the most recent search."
        ),
        annotations=_READ_ONLY,
    )
    async def get_search(
        search_id: Annotated[str | None, Field(description="default: the most recent search")] = None,
        max_candidates: Annotated[int, Field(ge=1, le=50)] = 5,
    ) -> OptimizeResult:
        try:
            return tools.searches.get(search_id).result(max_candidates)
        except KernelInputError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(
        title="One candidate of a search",
        description=(
            "One candidate of a search: its whole text, its profile, the diff against the original kernel "
            "and line edits to apply it. The server does not apply it: edit the file yourself."
        ),
        annotations=_READ_ONLY,
    )
    async def get_candidate(
        candidate_id: Annotated[
            str, Field(description="a candidate id from the ranking, or 'best'")
        ] = "best",
        search_id: Annotated[str | None, Field(description="default: the most recent search")] = None,
    ) -> CandidateDetail:
        try:
            run = tools.searches.get(search_id)
            candidate = run.candidate(candidate_id)
        except KernelInputError as exc:
            raise ToolError(str(exc)) from None
        original = run.kernel.text
        return CandidateDetail(
            search_id=run.id,
            id=candidate.id,
            rank=run.rank_of(candidate.id),
            parent_id=candidate.parent_id,
            iteration=candidate.iteration,
            status=candidate.status,
            message=candidate.message,
            line=candidate.line,
            speedup=candidate.speedup,
            title=candidate.plan.title if candidate.plan else "",
            rationale=[plan.title for plan in candidate.rationale],
            plan_description=candidate.plan.description if candidate.plan else "",
            text=candidate.kernel.text,
            diff=unified_diff(original, candidate.kernel.text, run.kernel.path),
            edits=line_edits(original, candidate.kernel.text),
            profile=profile_report(candidate.profile) if candidate.profile is not None else None,
        )

    @server.tool(
        title="Lessons for a kernel",
        description=(
            "The lessons in AccelOpt's optimization memory most relevant to a kernel (what earlier searches "
            "learnt made similar kernels faster or slower), most relevant first."
        ),
        annotations=_READ_ONLY,
    )
    async def memory_search(
        path: PathArg = None,
        source: SourceArg = None,
        kernel: KernelArg = None,
        hardware: HardwareArg = None,
        limit: Annotated[int, Field(ge=1, le=64, description="lessons to return")] = 8,
    ) -> MemoryResult:
        try:
            found = await asyncio.to_thread(load_kernel, path, source, kernel)
        except KernelInputError as exc:
            raise ToolError(str(exc)) from None
        return await asyncio.to_thread(_lessons, settings, found, tools.hardware(hardware), limit)

    @server.tool(
        title="Hardware targets",
        description="The Trainium generations AccelOpt can profile for, with the specs its timing model uses.",
        annotations=_READ_ONLY,
    )
    async def list_targets() -> TargetsResult:
        from accelopt.profiling.backends import BACKENDS

        return TargetsResult(
            targets=[target_info(name) for name in TARGETS],
            backends=list(BACKENDS),
            default_backend=settings.run.backend,
        )

    for name in TARGETS:
        _add_spec_sheet(server, name)

    @server.resource(
        NKI_RULES_URI,
        name="nki-rules",
        title="NKI rules AccelOpt checks",
        description="The NKI rules the emulator enforces, with their error codes, and what the sandbox refuses",
        mime_type="text/markdown",
    )
    def nki_rules() -> str:
        return resources.files("accelopt.mcp").joinpath("nki_rules.md").read_text(encoding="utf-8")

    return server


def _add_spec_sheet(server: MCPServer[Any], name: str) -> None:
    @server.resource(
        spec_sheet_uri(name),
        name=f"hardware-{name}",
        title=f"{name} spec sheet",
        description=f"The {name} figures AccelOpt's timing model and roofline use",
        mime_type="text/markdown",
    )
    def sheet() -> str:
        return spec_sheet(name)


def _lessons(settings: McpSettings, kernel: KernelSource, hardware: str, limit: int) -> MemoryResult:
    from accelopt.search.memory import Memory, MemoryUnavailable

    try:
        memory = Memory(settings.run.memory)
    except (MemoryUnavailable, OSError) as exc:
        raise ToolError(f"the optimization memory cannot be read: {exc}") from None
    with memory:
        found = memory.select_for_prompt(kernel, None, limit=limit, hardware=hardware)
        total = memory.count()
    return MemoryResult(
        memory=str(memory.path),
        total_experiences=total,
        lessons=[
            LessonInfo(
                id=exp.id,
                title=exp.lesson.title,
                plan=exp.lesson.plan,
                positive=exp.positive,
                speedup=round(exp.speedup, 4),
                kernel_family=exp.kernel_family,
                hardware=exp.hardware,
                backend=exp.backend,
                before=exp.lesson.before,
                after=exp.lesson.after,
            )
            for exp in found
        ],
    )


def _warm_imports() -> None:
    """Import what the first profile and the first search need (numpy, the simulator, the offline
    agents with libcst: a second or two) while the agent is still reading the tool list."""
    import accelopt.agents.offline
    import accelopt.profiling.simulator
    import accelopt.search.beam  # noqa: F401


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("accelopt")
    except PackageNotFoundError:
        return "0"

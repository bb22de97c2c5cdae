"""Evaluations as Ray tasks, for when one machine is not enough.

Each evaluation becomes one Ray task that runs the ordinary backend (`simulator` or `neuron`) in
a Ray worker process on some node of the cluster, so the kernel still runs inside that node's
sandbox; only the validated `Evaluation` comes back. The search, its agents and its memory stay
in the driver. Hardware evaluations ask for one unit of the `neuron_cores` custom resource, which
Trainium nodes declare when they join (`ray start --resources='{"neuron_cores": 32}'`), so they
are only scheduled where a NeuronCore is free.

A task whose worker dies (killed, out of memory, its node lost) is tried once more; a second
loss is recorded on the candidate as a `runtime_error` naming the cause. Cancelling an
evaluation cancels its task (force: the worker process is killed, and with it the sandbox).

`address=None` starts a private local cluster bound to the loopback interface only (Ray's own
default on Linux is to advertise the machine's network address); it is shut down by `aclose`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, Field

from accelopt.profiling.backend import Backend, EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource

if TYPE_CHECKING:
    from accelopt.profiling.task import Task

log = logging.getLogger(__name__)

LOCAL = "local"
NEURON_CORES = "neuron_cores"


class RayUnavailable(RuntimeError):
    """The cluster cannot run these evaluations; the message says what to do."""


class RaySettings(BaseModel):
    address: str = Field(LOCAL, description="'local' starts a private loopback cluster; else a cluster to join")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local cluster (default: the machine's)")
    retries: int = Field(1, ge=0, description="further attempts after a lost worker")


def _resources_for(backend: str) -> dict[str, float]:
    return {NEURON_CORES: 1.0} if backend == "neuron" else {}


# -- the worker side: runs in a Ray worker process ---------------------------------------------

T = TypeVar("T")
_worker_backends: dict[str, Backend] = {}
_worker_loop: asyncio.AbstractEventLoop | None = None
_worker_lock = threading.Lock()


def _run_on_worker_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """One event loop per worker process, kept for its life: the backend's locks, caches and
    sandbox belong to it (a fresh loop per task would orphan them)."""
    global _worker_loop
    with _worker_lock:
        if _worker_loop is None:
            _worker_loop = asyncio.new_event_loop()
            threading.Thread(target=_worker_loop.run_forever, name="accelopt-evaluations", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coroutine, _worker_loop).result()


def evaluate_on_worker(
    backend_name: str, backend_options: dict[str, Any], kernel: dict[str, Any], task: dict[str, Any],
    options: dict[str, Any],
) -> dict[str, Any]:
    """The body of one Ray task: the node's own backend (kept between tasks, so a task's reference
    outputs are computed once per worker) evaluates the kernel in its sandbox."""
    from accelopt.profiling.backends import get_backend
    from accelopt.profiling.task import Task

    key = f"{backend_name}:{sorted(backend_options.items())}"
    backend = _worker_backends.get(key)
    if backend is None:
        backend = _worker_backends[key] = get_backend(backend_name, **backend_options)
    evaluation = _run_on_worker_loop(
        backend.evaluate(
            KernelSource.model_validate(kernel), Task.model_validate(task), EvaluationOptions.model_validate(options)
        )
    )
    return evaluation.model_dump(mode="json")


# -- the driver side ---------------------------------------------------------------------------


def backend_for(name: str, *, ray: str | None = None, **options: Any) -> Backend:
    """The named backend, local, or (with `ray`: 'local' or a cluster address) with each of its
    evaluations run as a Ray task on a cluster node."""
    from accelopt.profiling.backends import BACKENDS, get_backend

    if ray is None:
        return get_backend(name, **options)
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    return RayBackend(name, settings=RaySettings(address=ray), **options)


class RayBackend:
    """A Backend whose evaluations run as Ray tasks; `name` is the inner backend's, so results
    and caches are keyed as for a local run."""

    def __init__(
        self, backend: str = "simulator", *, settings: RaySettings | None = None, **backend_options: Any
    ) -> None:
        self.name = backend
        self.settings = settings or RaySettings()
        self.backend_options = {k: v for k, v in backend_options.items() if k != "max_workers"}
        self.max_in_flight = int(backend_options.get("max_workers", 2))
        self._slots = asyncio.Semaphore(self.max_in_flight)
        self._remote: Any = None
        self._started_cluster = False
        self._start_lock = asyncio.Lock()
        self.lost_workers = 0

    async def _ensure_started(self) -> Any:
        async with self._start_lock:
            if self._remote is None:
                self._remote = await asyncio.to_thread(self._start)
        return self._remote

    def _start(self) -> Any:
        local = self.settings.address == LOCAL
        if local:
            # Before Ray is imported: keep the private cluster on the loopback interface.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            import ray
        except ImportError as exc:
            raise RayUnavailable("Ray is not installed: pip install 'ray>=2.40' (or the accelopt[ray] extra)") from exc
        if not ray.is_initialized():
            try:
                if local:
                    ray.init(
                        num_cpus=self.settings.num_cpus, include_dashboard=False, log_to_driver=False,
                        namespace="accelopt",
                    )
                    self._started_cluster = True
                else:
                    ray.init(address=self.settings.address, log_to_driver=False, namespace="accelopt")
            except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError...
                raise RayUnavailable(f"cannot {'start' if local else 'join'} the Ray cluster "
                                     f"{'' if local else self.settings.address}: {exc}") from exc
        needed = _resources_for(self.name)
        offered = ray.cluster_resources()
        for resource, amount in needed.items():
            if offered.get(resource, 0.0) < amount:
                raise RayUnavailable(
                    f"no node of the Ray cluster offers the {resource!r} resource that {self.name} evaluations "
                    f"need; start the Trainium nodes with ray start --resources='{{\"{resource}\": N}}'"
                )
        return ray.remote(evaluate_on_worker).options(max_retries=0, resources=needed or None)

    async def evaluate(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> Evaluation:
        import ray.exceptions as errors

        try:
            remote = await self._ensure_started()
        except RayUnavailable as exc:
            return Evaluation(status="runtime_error", message=str(exc))
        lost: list[str] = []
        async with self._slots:
            for _attempt in range(self.settings.retries + 1):
                ref = remote.remote(
                    self.name, self.backend_options, kernel.model_dump(mode="json"), task.model_dump(mode="json"),
                    options.model_dump(mode="json"),
                )
                try:
                    result = await ref
                except asyncio.CancelledError:
                    _cancel(ref)
                    raise
                except (errors.WorkerCrashedError, errors.NodeDiedError, errors.ObjectLostError,
                        errors.LocalRayletDiedError) as exc:
                    self.lost_workers += 1
                    lost.append(_first_line(exc))
                    log.warning("an evaluation's Ray worker was lost (%s); %s", lost[-1],
                                "retrying" if len(lost) <= self.settings.retries else "giving up")
                    continue
                except errors.RayTaskError as exc:  # our own code failed on the worker: a bug, said as one
                    return Evaluation(status="runtime_error", message=f"the evaluation failed on its Ray worker: "
                                      f"{_first_line(exc)}")
                evaluation = Evaluation.model_validate(result)
                if lost:
                    note = f"(its first Ray worker was lost: {lost[0]}; retried)"
                    evaluation.message = f"{evaluation.message} {note}".strip()
                return evaluation
        return Evaluation(
            status="runtime_error",
            message=f"the Ray worker running this evaluation was lost {len(lost)} times: {'; '.join(lost)}",
        )

    async def aclose(self) -> None:
        if self._started_cluster:
            import ray

            await asyncio.to_thread(ray.shutdown)
            self._started_cluster = False
            self._remote = None


def _cancel(ref: Any) -> None:
    import ray

    try:
        ray.cancel(ref, force=True)
    except Exception:  # already finished or its worker already gone
        log.debug("cancelling a Ray task failed", exc_info=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]

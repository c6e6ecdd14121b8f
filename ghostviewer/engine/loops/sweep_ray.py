"""Sweeps on Ray: one actor per GPU (or per CPU slot when the cluster has no GPU), each loading the pipeline once
and writing its runs into the study's runs folder, which every node must see at the same path (a shared
filesystem on a cluster). Results stream back as they come; only the driver writes study.sqlite.

`address`: "auto" joins the running cluster (RAY_ADDRESS, or one started with `ray start`) and starts a local
instance when there is none; "local" always starts a local instance; anything else is a cluster address
(`ray://head:10001` or `head:6379`). A Ray session the caller already started (`ray.init(...)`) is used as it is.

What a cluster does to a sweep, and what the driver does about it:
- a worker lost (its node died, its process was killed — Ray's memory monitor, a segfault): the run it was making
  is made again on another worker, once; a worker is started in its place, which waits for room if no node has
  any while the others go on. Losing a run's worker twice stops the sweep (that run may be what kills them).
- a run that meets an out-of-memory or a device error (a CUDA error poisons the process's context for good): its
  worker is replaced by a fresh process and the run made again, once; failing again it is recorded failed, with
  its error, and the sweep goes on.
- every worker lost and none up again within WAIT_FOR_WORKER_S: the sweep stops; what it made is in the study,
  and a resume makes only what is missing. (The first workers are waited for as long as they take to start.)
Each of these is said through `note` (the driver writes it into the study's events).
"""

from __future__ import annotations

import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops.sweep_jobs import SweepJob
from ghostviewer.engine.loops.sweep_spec import SweepSpec, run_one
from ghostviewer.engine.run.runner import CancelToken
from ghostviewer.record import RecordError
from ghostviewer.spec import RunSpec

Results = Iterator[tuple[SweepJob, dict[str, Any]]]
Note = Callable[[str], None]

RETRIES = 1  # a run whose worker was lost, or that met a device error, is made again once
WAIT_FOR_WORKER_S = 300.0  # with every worker lost: how long the sweep waits for one to come up (and load)
# How a run's error reads when the device, not the pipeline, gave out (torch's OutOfMemoryError, CUDA/HIP errors).
DEVICE_ERRORS = ("OutOfMemoryError", "CUDA out of memory", "CUDA error", "CUBLAS_STATUS_", "CUDNN_STATUS_",
                 "cuDNN error", "device-side assert", "HIP error", "NCCL error", "ECC error")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise GhostError("--ray needs Ray: pip install 'ghostviewer[ray]'") from None
    return ray


def connect(address: str) -> Any:
    """The ray module, connected to a cluster (or a local instance) per `address`."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                               "configure_logging": False}
    try:
        if address == "local":
            ray.init(address="local", **options)  # a new instance even where a cluster runs on this machine
        elif address == "auto":
            try:
                ray.init(address="auto", log_to_driver=False, configure_logging=False)
            except ConnectionError:
                ray.init(**options)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise GhostError(f"cannot reach the Ray cluster at {address}: {_last_line(str(exc))}") from None
    return ray


class SweepWorker:
    """A Ray actor's state: the pipeline, loaded once; runs sweep jobs into the shared runs folder."""

    def __init__(self, params: dict[str, Any], threads: int, allow_pickle: bool = False) -> None:
        import torch

        from ghostviewer.engine.loading.pipelines import load_pipeline

        torch.set_num_threads(max(1, threads))
        self.spec = SweepSpec.from_params(params)
        self.spec.allow_pickle = allow_pickle  # the driver's command line's (from_params never takes it)
        base = self.spec.base
        self.loaded = load_pipeline(base.source, base.device, base.dtype, allow_pickle, config=self.spec.config)
        self.token = CancelToken()

    def node(self) -> str:
        """The Ray node this worker runs on (asked once it is up: its answer says it loaded)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def run(self, job: SweepJob, runs_dir: str) -> dict[str, Any]:
        settings = RunSpec.from_dict({**job.settings(self.spec.base).to_dict(), "source": self.loaded.source})
        return run_one(self.loaded, settings, Path(runs_dir), self.token, self.spec.tensors_every,
                       self.spec.fingerprints)

    def cancel(self) -> None:
        self.token.cancel()


WORKER: type = SweepWorker  # the actor class (tests and benchmarks put a SweepWorker subclass here)


def device_error(result: dict[str, Any]) -> str | None:
    """The first line of a failed run's error when the device gave out (out of memory, a CUDA error)."""
    error = str(result.get("error") or "") if result.get("status") == "failed" else ""
    return _last_line(error.splitlines()[0]) if error and any(m in error for m in DEVICE_ERRORS) else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _what(job: SweepJob) -> str:
    return f"prompt {job.prompt[:60]!r} seed {job.seed}"


@dataclass
class _Worker:
    handle: Any
    node: str = ""
    busy: bool = False


class _Pool:
    """The sweep's actors: starting (their `node()` answer pending), idle, or busy with one run."""

    def __init__(self, ray: Any, params: dict[str, Any], allow_pickle: bool) -> None:
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        self.capacity = gpus or max(1, int(resources.get("CPU", 1)))
        options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 0} if gpus else {"num_cpus": 1}
        self._ray = ray
        self._actor = ray.remote(max_concurrency=2, max_restarts=0, **options)(WORKER)  # 2: a cancel gets in
        self._args = (params, 1, allow_pickle)
        self.starting: dict[Any, _Worker] = {}
        self.workers: list[_Worker] = []
        self.failed_starts = 0
        self.lost = 0  # workers lost (dropped) so far

    def start(self) -> None:
        worker = _Worker(self._actor.remote(*self._args))
        self.starting[worker.handle.node.remote()] = worker

    def started(self, ref: Any) -> None:
        """A starting worker answered: idle from now on, or an error when it cannot load the pipeline."""
        worker = self.starting.pop(ref)
        try:
            worker.node = self._ray.get(ref)
        except self._ray.exceptions.RayActorError as exc:
            self._ray.kill(worker.handle)
            if exc.actor_init_failed:  # the pipeline does not load: so on every worker
                raise GhostError(f"a Ray worker could not start: {_last_line(str(exc))}") from None
            self.failed_starts += 1
            if self.failed_starts > 3 * self.capacity:
                raise GhostError(f"Ray workers keep dying as they start: {_last_line(str(exc))}") from None
            return
        self.failed_starts = 0
        self.workers.append(worker)

    def idle(self) -> _Worker | None:
        return next((w for w in self.workers if not w.busy), None)

    def busy(self) -> int:
        return sum(w.busy for w in self.workers)

    def size(self) -> int:
        return len(self.workers) + len(self.starting)

    def drop(self, worker: _Worker) -> None:
        """Kill it (a lost worker, or one whose device may be poisoned) and forget it."""
        if worker in self.workers:
            self.workers.remove(worker)
        self.lost += 1
        self._ray.kill(worker.handle, no_restart=True)

    def all(self) -> list[Any]:
        return [w.handle for w in self.workers] + [w.handle for w in self.starting.values()]


def ray_results(spec: SweepSpec, jobs: Iterable[SweepJob], runs_dir: Path, cancel: CancelToken,
                address: str, note: Note | None = None) -> Results:
    """Run the jobs on Ray actors, at most one in flight per actor; yields (job, run dict) as they finish.
    Workers are started as jobs wait for them (no more than the cluster's slots); none when there is no job."""
    say = note or (lambda _message: None)
    pending = iter(jobs)
    first = next(pending, None)
    if first is None:
        return
    ray = connect(address)
    pool = _Pool(ray, {**spec.params(0), "list": None, "items": []}, spec.allow_pickle)
    queue: deque[tuple[SweepJob, int]] = deque([(first, 0)])  # (job, tries so far): retried ones first
    flying: dict[Any, tuple[SweepJob, int, _Worker]] = {}
    exhausted = cancelled = False
    stranded: float | None = None  # since when every worker is lost (none up, none busy)
    try:
        while True:
            while not cancelled and not exhausted and len(queue) + pool.busy() < pool.capacity:
                job = next(pending, None)
                if job is None:
                    exhausted = True
                else:
                    queue.append((job, 0))
            while not cancelled and queue and (worker := pool.idle()) is not None:
                job, tries = queue.popleft()
                worker.busy = True
                flying[worker.handle.run.remote(job, str(runs_dir))] = (job, tries, worker)
            while not cancelled and len(pool.starting) < len(queue) and pool.size() < pool.capacity:
                pool.start()
            if not flying and (cancelled or not queue):
                return
            ready, _ = ray.wait([*flying, *pool.starting], num_returns=1, timeout=0.5)
            if cancel.is_cancelled() and not cancelled:
                cancelled = True
                for handle in pool.all():
                    handle.cancel.remote()
            if pool.workers or not pool.lost:
                stranded = None
            elif stranded is None:
                stranded = time.monotonic()
            elif time.monotonic() - stranded > WAIT_FOR_WORKER_S:
                raise GhostError(f"no Ray worker left, and none came up in {WAIT_FOR_WORKER_S:.0f} s; the runs "
                                 "made so far are recorded: resume the sweep when the cluster is back")
            for ref in ready:
                if ref in pool.starting:
                    pool.started(ref)
                    continue
                job, tries, worker = flying.pop(ref)
                worker.busy = False
                result = _outcome(ray, ref, job, tries, worker, pool, queue, say, runs_dir)
                if result is not None:
                    yield job, result
    finally:
        for handle in pool.all():
            ray.kill(handle, no_restart=True)


def _outcome(ray: Any, ref: Any, job: SweepJob, tries: int, worker: _Worker, pool: _Pool,
             queue: deque[tuple[SweepJob, int]], say: Note, runs_dir: Path) -> dict[str, Any] | None:
    """The run dict to record, or None when the run is made again (queued first)."""
    try:
        result = ray.get(ref)
    except ray.exceptions.RayTaskError as exc:  # run_one raised: a refusal or a full disk, the same on any worker
        cause = getattr(exc, "cause", None)  # the worker's own exception (str(exc) is its traceback)
        if isinstance(cause, (GhostError, RecordError)):
            raise cause from None
        raise GhostError(f"a Ray worker failed: {_last_line(str(cause if cause is not None else exc))}") from None
    except ray.exceptions.RayActorError as exc:
        pool.drop(worker)
        lost = f"the Ray worker on node {worker.node[:12]} was lost while making {_what(job)}"
        if tries >= RETRIES:
            raise GhostError(f"{lost}, its second worker lost ({_last_line(str(exc))}); the runs made so far "
                             "are recorded: resume the sweep to go on") from None
        say(f"{lost}: the run is made again on another worker")
        queue.appendleft((job, tries + 1))
        return None
    error = device_error(result)
    if error is None:
        return result
    pool.drop(worker)  # its device may be poisoned for good: a fresh process takes its place
    if tries >= RETRIES:
        say(f"{_what(job)} met a device error again on a restarted Ray worker: recorded failed ({error})")
        return {**result, "error": f"{error} (again after its Ray worker was restarted)"}  # whole in its record
    say(f"{_what(job)} met a device error on the Ray worker on node {worker.node[:12]} ({error}): the worker is "
        "restarted and the run made again")
    if Path(result["run_dir"]).parent == runs_dir:  # the retry's record replaces it
        shutil.rmtree(result["run_dir"], ignore_errors=True)
    queue.appendleft((job, tries + 1))
    return None

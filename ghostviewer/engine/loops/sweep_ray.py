"""Sweeps on Ray: one actor per GPU (or per CPU slot when the cluster has no GPU), each loading the pipeline once
and writing its runs into the study's runs folder, which every node must see at the same path (a shared
filesystem on a cluster). Results stream back as they come; only the driver writes study.sqlite.

`address`: "auto" joins the running cluster (RAY_ADDRESS, or one started with `ray start`) and starts a local
instance when there is none; "local" always starts a local instance; anything else is a cluster address
(`ray://head:10001` or `head:6379`). A Ray session the caller already started (`ray.init(...)`) is used as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops.sweep_jobs import SweepJob
from ghostviewer.engine.loops.sweep_spec import SweepSpec, run_one
from ghostviewer.engine.run.runner import CancelToken
from ghostviewer.spec import RunSpec

Results = Iterator[tuple[SweepJob, dict[str, Any]]]


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
            ray.init(**options)
        elif address == "auto":
            try:
                ray.init(address="auto", log_to_driver=False, configure_logging=False)
            except ConnectionError:
                ray.init(**options)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise GhostError(f"cannot reach the Ray cluster at {address}: {exc}") from None
    return ray


class SweepWorker:
    """A Ray actor's state: the pipeline, loaded once; runs sweep jobs into the shared runs folder."""

    def __init__(self, params: dict[str, Any], threads: int) -> None:
        import torch

        from ghostviewer.engine.loading.pipelines import load_pipeline

        torch.set_num_threads(max(1, threads))
        self.spec = SweepSpec.from_params(params)
        base = self.spec.base
        self.loaded = load_pipeline(base.source, base.device, base.dtype, self.spec.allow_pickle,
                                    config=self.spec.config)
        self.token = CancelToken()

    def run(self, job: SweepJob, runs_dir: str) -> dict[str, Any]:
        settings = RunSpec.from_dict({**job.settings(self.spec.base).to_dict(), "source": self.loaded.source})
        return run_one(self.loaded, settings, Path(runs_dir), self.token, self.spec.tensors_every,
                       self.spec.fingerprints)

    def cancel(self) -> None:
        self.token.cancel()


def _actors(ray: Any, params: dict[str, Any]) -> list[Any]:
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    count = gpus or max(1, int(resources.get("CPU", 1)))
    options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 0} if gpus else {"num_cpus": 1}
    actor = ray.remote(max_concurrency=2, **options)(SweepWorker)  # 2: a cancel gets in while a run goes
    return [actor.remote(params, threads=1) for _ in range(count)]


def ray_results(spec: SweepSpec, jobs: Iterable[SweepJob], runs_dir: Path, cancel: CancelToken,
                address: str) -> Results:
    """Run the jobs on Ray actors, at most one in flight per actor; yields (job, run dict) as they finish."""
    ray = connect(address)
    actors = _actors(ray, {**spec.params(0), "list": None, "items": []})
    idle = list(actors)
    flying: dict[Any, tuple[SweepJob, Any]] = {}
    pending = iter(jobs)
    cancelled = False
    try:
        while True:
            while idle and not cancelled:
                job = next(pending, None)
                if job is None:
                    break
                actor = idle.pop()
                flying[actor.run.remote(job, str(runs_dir))] = (job, actor)
            if not flying:
                return
            ready, _ = ray.wait(list(flying), num_returns=1, timeout=0.5)
            if cancel.is_cancelled() and not cancelled:
                cancelled = True
                for actor in actors:
                    actor.cancel.remote()
            for ref in ready:
                job, actor = flying.pop(ref)
                idle.append(actor)
                yield job, _result(ray, ref)
    finally:
        for actor in actors:
            ray.kill(actor)


def _result(ray: Any, ref: Any) -> dict[str, Any]:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = exc.as_instanceof_cause()
        if isinstance(cause, GhostError):
            raise GhostError(str(cause)) from None
        raise GhostError(f"a Ray worker failed: {str(cause).splitlines()[-1] if str(cause) else cause}") from None
    except ray.exceptions.RayActorError as exc:
        raise GhostError(f"a Ray worker died: {exc}") from None

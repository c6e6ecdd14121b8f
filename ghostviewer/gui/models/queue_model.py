"""The run queue: jobs waiting, running and done, with their progress. The controller moves them along."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal

FINISHED = ("done", "failed", "cancelled")


@dataclass
class Job:
    id: int
    settings: dict[str, Any]
    status: str = "queued"  # queued | running | done | failed | cancelled
    step: int = 0  # steps recorded so far
    run_dir: str | None = None
    verdict: str | None = None
    error: str | None = None
    replay_of: str | None = None  # the run this job replays
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return int(self.settings.get("steps") or 0)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def title(self) -> str:
        prompt = str(self.settings.get("prompt") or "(empty prompt)")
        prompt = prompt if len(prompt) <= 48 else prompt[:47] + "…"
        return ("replay · " if self.replay_of else "") + f"{prompt} · seed {self.settings.get('seed')}"


class QueueModel(QObject):
    jobAdded = Signal(int)
    jobChanged = Signal(int)
    jobRemoved = Signal(int)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)

    def add(self, settings: dict[str, Any], replay_of: str | None = None) -> Job:
        job = Job(next(self._ids), dict(settings), replay_of=replay_of)
        self._jobs[job.id] = job
        self.jobAdded.emit(job.id)
        return job

    def job(self, job_id: int) -> Job | None:
        return self._jobs.get(job_id)

    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def next_queued(self) -> Job | None:
        return next((job for job in self._jobs.values() if job.status == "queued"), None)

    def running(self) -> Job | None:
        return next((job for job in self._jobs.values() if job.status == "running"), None)

    def by_run_dir(self, run_dir: str) -> Job | None:
        return next((job for job in self._jobs.values() if job.run_dir == run_dir), None)

    def update(self, job_id: int, **values: Any) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            return
        for key, value in values.items():
            if not hasattr(job, key):
                raise AttributeError(f"Job has no field {key!r}")
            setattr(job, key, value)
        self.jobChanged.emit(job_id)

    def clear_finished(self) -> None:
        for job_id in [j.id for j in self._jobs.values() if j.finished]:
            del self._jobs[job_id]
            self.jobRemoved.emit(job_id)

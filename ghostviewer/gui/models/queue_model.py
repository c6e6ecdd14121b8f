"""The run queue: jobs waiting, running and ended, with their progress and how they ended. The job scheduler
(gui/job_scheduler.py) moves them along; every job ends done, failed or cancelled."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.analysis.verdicts import verdict_is_bad

FINISHED = ("done", "failed", "cancelled")
ENDED_BY = {"run": "", "engine": "the engine stopped", "load": "the pipeline did not load", "user": "",
            "shutdown": "the window closed"}


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
    ended_by: str = ""  # run (the engine ended it) | engine (died, restarted) | load | user | shutdown
    first_anomaly: dict[str, Any] | None = None  # as the engine reported it at the end
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

    def state(self) -> tuple[str, str]:
        """(text, kind) for the queue row; kind is a verdict badge kind: none, running, ok, bad, failed,
        cancelled, incomplete (a failed job whose engine stopped under it)."""
        if self.status == "done":
            if not self.verdict:
                return "done", "none"
            return self.verdict, "bad" if verdict_is_bad(self.verdict) else "ok"
        if self.status == "failed" and self.ended_by == "engine":
            return "engine died", "incomplete"
        return self.status, {"queued": "none"}.get(self.status, self.status)

    def state_tip(self) -> str:
        """How the job ended, in words (the queue row's tooltip)."""
        lines = [self.run_dir or str(self.settings.get("prompt") or "")]
        if self.finished:
            why = self.error or ENDED_BY.get(self.ended_by, "")
            lines.append(f"{self.status}" + (f": {why}" if why else "") + (f" (verdict {self.verdict})"
                                                                          if self.verdict else ""))
        anomaly = self.first_anomaly
        if anomaly:
            lines.append(f"first anomaly: {anomaly.get('kind')} at {anomaly.get('phase')} step "
                         f"{anomaly.get('step')} in {anomaly.get('module')}")
        return "\n".join(line for line in lines if line)


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

"""The run queue: jobs waiting, running and ended, with their progress and how they ended. The job scheduler
(gui/link/job_scheduler.py) moves them along; every job ends done, failed or cancelled."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.analysis.verdicts import verdict_is_bad
from ghostviewer.gui.models.prompt_model import intervention_words
from ghostviewer.gui.models.timeline_model import anomaly_where, planned_steps

FINISHED = ("done", "failed", "cancelled")
ENDED_BY = {"run": "", "engine": "the engine stopped", "load": "the pipeline did not load", "user": "",
            "shutdown": "the window closed"}
SHORT_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
PROMPT_CHARS = 48


def setup_words(settings: dict[str, Any]) -> list[str]:
    """The row's compact setup: ['seed 7', 'fp16', 'ghost: nan-latents', '2 bypasses', '1 capture']."""
    dtype = settings.get("dtype")
    return [f"seed {settings.get('seed')}", *([SHORT_DTYPES.get(str(dtype), str(dtype))] if dtype else []),
            *intervention_words(settings)]


def setup_lines(settings: dict[str, Any]) -> list[str]:
    """The same in full, for the tooltip: every bypassed and captured module named."""
    s = settings
    dtype = s.get("dtype") or "the pipeline's own"
    lines = [f"seed {s.get('seed')} · {s.get('steps')} steps · dtype {dtype} · {s.get('source') or 'demo'}"
             f" on {s.get('device') or 'auto'}"]
    faults = [str(f) for f in s.get("faults") or []]
    lines.append("ghost: " + ", ".join(faults) if faults else "no ghost")
    for key in ("bypass", "capture"):
        modules = [str(m) for m in s.get(key) or []]
        if modules:
            lines.append(f"{key} ({len(modules)}): " + ", ".join(modules))
    if s.get("capture_attention"):
        lines.append("attention capture")
    return lines


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
    extra: dict[str, Any] = field(default_factory=dict)  # "label": "replay 2/5" (a replay of a batch)
    waiting: str = ""  # why a queued job does not start yet ("waiting for the bisection")

    @property
    def steps(self) -> int:
        """The denoising steps the run makes (img2img at strength 0.7 of 6 steps: 4), what its progress counts."""
        return planned_steps(self.settings) or 0

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def label(self) -> str:
        """The row's tag: "replay 2/5" for one replay of a batch, "replay" for a single one, "" for a run."""
        return str(self.extra.get("label") or ("replay" if self.replay_of else ""))

    @property
    def title(self) -> str:
        """'replay 2/5 · seed 7 · fp16 · ghost: nan-latents · 1 bypass · a red circle…' (the row's text)."""
        prompt = str(self.settings.get("prompt") or "(empty prompt)")
        prompt = prompt if len(prompt) <= PROMPT_CHARS else prompt[:PROMPT_CHARS - 1] + "…"
        return " · ".join([*([self.label] if self.label else []), *setup_words(self.settings), prompt])

    def state(self) -> tuple[str, str]:
        """(text, kind) for the queue row; kind is a verdict badge kind: none, running, ok, bad, failed,
        cancelled, incomplete (a failed job whose engine stopped under it)."""
        if self.status == "done":
            if not self.verdict:
                return "done", "none"
            return self.verdict, "bad" if verdict_is_bad(self.verdict) else "ok"
        if self.status == "failed" and self.ended_by == "engine":
            return "engine died", "incomplete"
        if self.status == "queued" and self.waiting:
            return "waiting", "none"
        return self.status, {"queued": "none"}.get(self.status, self.status)

    def state_tip(self) -> str:
        """The job in full and how it ended, in words (the queue row's tooltip)."""
        lines = [self.run_dir or str(self.settings.get("prompt") or "")]
        if self.label:
            lines.append(self.label + (f" of {self.replay_of}" if self.replay_of else ""))
        lines.extend(setup_lines(self.settings))
        if self.status == "queued" and self.waiting:
            lines.append(self.waiting)
        if self.finished:
            why = self.error or ENDED_BY.get(self.ended_by, "")
            lines.append(f"{self.status}" + (f": {why}" if why else "") + (f" (verdict {self.verdict})"
                                                                          if self.verdict else ""))
        anomaly = self.first_anomaly
        if anomaly:
            lines.append(f"first anomaly: {anomaly.get('kind')} at {anomaly_where(anomaly)} in "  # never "step None"
                         f"{anomaly.get('module')}")
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

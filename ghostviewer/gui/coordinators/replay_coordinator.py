"""Replays: run a recorded run again N times with exactly its recorded settings and, when the last of those jobs
has ended, compare each finished replay with the original (analysis.compare.compare_runs): "reproduced k/N",
with the first divergence found. Several replays are one `replay` study, as `ghostviewer replay --times N`
makes: the original referenced where it lies, each replay written into the study's runs folder and added as it
ends, the result "reproduced k/N" — so the history shows one study row, not N run rows."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.analysis.compare import compare_runs, describe_divergence
from ghostviewer.gui import messages
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter, one_line
from ghostviewer.gui.link.job_scheduler import JobScheduler
from ghostviewer.gui.models.queue_model import Job
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RecordError, RunRecord, StudyWriter

log = logging.getLogger("ghostviewer.gui")


@dataclass
class ReplayBatch:
    original: str
    seed: Any
    job_ids: tuple[int, ...]
    ended: dict[int, tuple[str, str | None]] = field(default_factory=dict)  # job id: (status, run folder)
    study: StudyWriter | None = None  # several replays: their study, open until the last one ends


def check_replays(original: str, seed: Any, replays: list[str | None]) -> dict[str, Any]:
    """Compare each replay folder (None: it did not finish) with the original. The result has compare_runs'
    keys for the first diverging replay (else the last checked one) and "times", "checked",
    "reproduced_count", "replays"; "reproduced" is True (all N), False (one diverged) or None (unfinished)."""
    checked: list[dict[str, Any]] = []
    for run_dir in replays:
        if run_dir is None:
            continue
        try:
            checked.append(compare_runs(original, run_dir))
        except (RecordError, OSError) as exc:
            log.warning("cannot compare the replay %s with %s: %s", run_dir, original, one_line(exc))
    diverged = [result for result in checked if not result["reproduced"]]
    count = len(checked) - len(diverged)
    shown = diverged[0] if diverged else (checked[-1] if checked else {})
    reproduced = True if count == len(replays) else (False if diverged else None)
    return {"original": original, "replay": None, "seed": seed, "steps": None, "first_divergence": None,
            "environment_diff": {}, **shown, "reproduced": reproduced, "times": len(replays),
            "checked": len(checked), "reproduced_count": count, "replays": replays}


def describe_replays(result: dict[str, Any]) -> str:
    seed, n, k = result.get("seed"), int(result["times"]), int(result["reproduced_count"])
    if n == 1:
        if result["reproduced"]:
            return messages.REPLAY_REPRODUCED.format(seed=seed, steps=result.get("steps"))
        if result["reproduced"] is None:
            status = (result.get("statuses") or ["unchecked"])[0]
            return messages.REPLAY_UNCHECKED.format(seed=seed, status=status)
        return messages.REPLAY_DIVERGED.format(seed=seed, where=describe_divergence(result["first_divergence"]))
    missing = n - int(result["checked"])
    unfinished = messages.REPLAYS_UNFINISHED.format(count=missing) if missing else ""
    if result["first_divergence"] is None:
        return messages.REPLAYS_REPRODUCED.format(seed=seed, k=k, n=n, unfinished=unfinished)
    where = describe_divergence(result["first_divergence"])
    return messages.REPLAYS_DIVERGED.format(seed=seed, k=k, n=n, unfinished=unfinished, where=where)


class ReplayCoordinator(QObject):
    sigMessage = Signal(str)
    replayChecked = Signal(dict)  # check_replays' result, once the batch's last job has ended
    studyChanged = Signal(str)  # a replay study was made or finished (the history lists it)

    def __init__(self, scheduler: JobScheduler, timeline: TimelineModel, reporter: ErrorReporter,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.scheduler, self.queue, self.timeline, self.reporter = scheduler, scheduler.queue, timeline, reporter
        self._batches: list[ReplayBatch] = []
        scheduler.jobStarted.connect(self._on_job_started)
        scheduler.jobEnded.connect(self._on_job_ended)

    def replay(self, run_dir: str | None = None, times: int = 1, source: str | None = None) -> list[Job]:
        """Queue `times` replays of a run (the shown one by default); [] when there is none to replay. `source`:
        the pipeline to replay it on instead of the recorded one (a bug report's run, its weights checked)."""
        run_dir = run_dir or self.timeline.run_dir
        if run_dir is None:
            self.reporter.report(messages.NO_RUN_SELECTED)
            return []
        try:
            record = RunRecord(run_dir)
            settings = dict(record.settings) | ({"source": source} if source else {})
        except RecordError as exc:
            self.reporter.note(messages.NOT_A_RUN.format(path=run_dir, message=one_line(exc)))
            return []
        times = max(1, int(times))
        study = self._open_study(record, settings, times) if times > 1 else None
        jobs = self.scheduler.submit_many([settings] * times, replay_of=str(record.path),
                                          runs_dir=None if study is None else str(study.runs_dir))
        self._batches.append(ReplayBatch(str(record.path), settings.get("seed"), tuple(j.id for j in jobs),
                                         study=study))
        if study is not None:
            self.studyChanged.emit(str(study.path))
        if times > 1:
            for k, job in enumerate(jobs, 1):
                self.queue.update(job.id, extra={**job.extra, "label": messages.REPLAY_LABEL.format(k=k, n=times)})
        seed = settings.get("seed")
        text = messages.REPLAY_QUEUED if times == 1 else messages.REPLAYS_QUEUED
        self.sigMessage.emit(text.format(seed=seed, times=times))
        return jobs

    def _open_study(self, record: RunRecord, settings: dict[str, Any], times: int) -> StudyWriter | None:
        """The replay study in the window's runs folder, the original in it (None, and said, when it cannot be
        written: the replays then go to the runs folder as runs of their own)."""
        try:
            study = StudyWriter.create(self.scheduler.runs_dir(), "replay", {
                "original": str(record.path), "times": times, "seed": settings.get("seed")}, total=times)
            study.add_run(record.path, {"original": record.run_id}, role="original", summary=record.summary())
        except (RecordError, OSError) as exc:
            self.reporter.note(messages.REPLAY_STUDY_FAILED.format(message=one_line(exc)))
            return None
        return study

    def _add_to_study(self, batch: ReplayBatch, job_id: int, status: str, run_dir: str | None) -> None:
        if batch.study is None or run_dir is None:
            return
        k = batch.job_ids.index(job_id) + 1
        try:
            summary = RunRecord(run_dir).summary()
            batch.study.add_run(run_dir, {"replay": k}, role="replay", summary={**summary, "status": status})
            batch.study.set_progress(len(batch.ended))
        except (RecordError, OSError) as exc:
            log.warning("cannot add the replay %s to its study: %s", run_dir, one_line(exc))

    def _finish_study(self, batch: ReplayBatch, result: dict[str, Any]) -> None:
        if batch.study is None:
            return
        done = all(status == "done" for status, _run_dir in batch.ended.values())
        report = {"reproduced": bool(result["reproduced"]), "times": result["times"],
                  "reproduced_runs": result["reproduced_count"], "original": batch.original, "seed": batch.seed,
                  "first_divergence": result.get("first_divergence"),
                  "summary": f"reproduced {result['reproduced_count']}/{result['times']}"}
        try:
            batch.study.finish("done" if done else "cancelled", result=report)
        except (RecordError, OSError) as exc:
            log.warning("cannot finish the replay study %s: %s", batch.study.path, one_line(exc))
        result["study_dir"] = str(batch.study.path)
        self.studyChanged.emit(str(batch.study.path))

    def _batch(self, job_id: int) -> ReplayBatch | None:
        return next((b for b in self._batches if job_id in b.job_ids), None)

    def _on_job_started(self, job_id: int, _run_dir: str) -> None:
        batch = self._batch(job_id)
        if batch is not None and len(batch.job_ids) > 1:
            k = batch.job_ids.index(job_id) + 1
            self.sigMessage.emit(messages.REPLAY_PROGRESS.format(k=k, n=len(batch.job_ids), seed=batch.seed))

    def _on_job_ended(self, job_id: int, status: str) -> None:
        batch = self._batch(job_id)
        if batch is None:
            return
        job = self.queue.job(job_id)
        batch.ended[job_id] = (status, job.run_dir if job is not None and status == "done" else None)
        self._add_to_study(batch, job_id, status, job.run_dir if job is not None else None)
        if len(batch.ended) < len(batch.job_ids):
            return
        self._batches.remove(batch)
        ended = [batch.ended[i] for i in batch.job_ids]
        result = check_replays(batch.original, batch.seed, [run_dir for _status, run_dir in ended])
        result["statuses"] = [status for status, _run_dir in ended]
        self._finish_study(batch, result)
        text = describe_replays(result)
        log.info("%s", text)
        self.sigMessage.emit(text)
        self.replayChecked.emit(result)

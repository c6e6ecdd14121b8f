"""Every run and study in the runs folder, read from the records alone (no engine), cached by modification time.

A study is one row whose children are its runs (they live in the study's own folder, out of the top level).
The runs of bug-report bundles opened in the window (extracted into <runs_dir>/bundles/<name>-<time>/runs/<id>)
are rows too, tagged with their bundle's name. A run (or study) folder that cannot be read — a missing or corrupt
database — is a row too (BrokenEntry), with the reader's message; a run read but for a part it refused (a final
image pointing outside its folder) is a run row with that `problem`. Nothing in the runs folder is dropped silently.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui.drops import looks_like_run
from ghostviewer.gui.models.prompt_model import intervention_words
from ghostviewer.gui.models.verdict_words import run_words
from ghostviewer.record import RecordError, RunRecord, StudyRecord
from ghostviewer.record.bundle_format import MANIFEST, README, REPRO, RUNS_FOLDER
from ghostviewer.record.lock import writer_alive

DB_FILES = ("run.sqlite", "run.sqlite-wal")
STUDY_DB_FILES = ("study.sqlite", "study.sqlite-wal")
BUNDLES_FOLDER = "bundles"  # where the window extracts the bundles it opens (gui/path_opener.py)
_EXTRACTED = re.compile(r"-\d{8}-\d{6}-[0-9a-f]{6}$")  # the time and token open_bundle adds to the name


def is_bundle_folder(folder: Path) -> bool:
    """An extracted bug report: runs/ beside the bundle's README.txt and repro.py (or its manifest)."""
    return (folder / RUNS_FOLDER).is_dir() and any((folder / name).is_file() for name in (README, REPRO, MANIFEST))


def bundle_of(run_dir: str | Path | None) -> Path | None:
    """The extracted bundle folder a run belongs to (<folder>/runs/<run_id>), or None."""
    if run_dir is None:
        return None
    runs = Path(run_dir).parent
    return runs.parent if runs.name == RUNS_FOLDER and is_bundle_folder(runs.parent) else None


def bundle_name(folder: str | Path) -> str:
    """'ghostviewer-bug-run-0042' for the folder open_bundle made of ghostviewer-bug-run-0042.zip."""
    return _EXTRACTED.sub("", Path(folder).name) or Path(folder).name


@dataclass(frozen=True)
class RunEntry:
    path: str
    run_id: str
    created: str
    prompt: str
    seed: object
    steps: object
    status: str  # running | done | failed | cancelled (running + not live = incomplete)
    verdict: str | None
    error: str | None
    changes: tuple[str, ...] = ()  # what the run changed in the pipeline: ("ghost: nan-latents", "1 bypass")
    first_anomaly: dict | None = None
    image: str | None = None  # the final image, for the thumbnail
    bundle: str = ""  # the bug report it came from (its name), for a run opened from a bundle
    problem: str = ""  # what the reader refused in it, in one line (e.g. its final image outside its folder)

    def state(self, live_run: str | None) -> str:
        """What the history shows: the verdict label (with the first anomaly's kind when the image passed
        anyway, as the verdict badge says it), or running / incomplete / cancelled / failed."""
        if self.status in ("running", "interrupted"):  # interrupted: its writer died (the record can tell)
            return "running" if live_run == self.path else "incomplete"
        return run_words(self.status, self.verdict, self.first_anomaly) if self.status != "done" or self.verdict \
            else "done"


@dataclass(frozen=True)
class StudyChild:
    """One run of a study, as the study's index lists it (no need to open the run to show it)."""

    path: str
    position: int
    role: str
    label: str  # the child's key in a few words, e.g. "seed 3"
    seed: object
    status: str | None
    verdict: str | None
    first_anomaly: dict | None = None

    def state(self) -> str:
        return run_words(self.status, self.verdict, self.first_anomaly)


@dataclass(frozen=True)
class StudyEntry:
    path: str
    study_id: str
    kind: str
    created: str
    status: str  # running | done | failed | cancelled (running + nothing live inside = incomplete)
    progress: str  # "7/30", or "7" when the total is unknown
    result: str  # the result in a few words
    error: str | None
    children: tuple[StudyChild, ...]

    @property
    def run_id(self) -> str:  # the tie-break key shared with RunEntry when sorting the history
        return self.study_id

    def state(self, live_run: str | None) -> str:
        """running (a run inside it is live) / incomplete (its writer stopped) / its final status."""
        if self.status == "running":
            live = live_run is not None and (live_run == self.path or live_run.startswith(self.path + os.sep))
            return "running" if live else "incomplete"
        return self.status


@dataclass(frozen=True)
class BrokenEntry:
    """A run or study folder that cannot be read (missing or corrupt database): listed with the reader's message."""

    path: str
    problem: str  # the reader's message, in one line
    created: str  # the folder's modification time (ISO), where the history sorts it

    @property
    def run_id(self) -> str:
        return Path(self.path).name

    def state(self, _live_run: str | None = None) -> str:
        return "unreadable"


HistoryRow = RunEntry | StudyEntry | BrokenEntry


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def broken_entry(folder: Path, problem: object) -> BrokenEntry:
    try:
        mtime = folder.stat().st_mtime
    except OSError:
        mtime = 0.0
    created = datetime.fromtimestamp(mtime, timezone.utc).isoformat(timespec="milliseconds")
    return BrokenEntry(str(folder), one_line(problem), created)


def result_words(result: object) -> str:
    """A study's result in a few words: its 'summary' when it has one, else its first plain values."""
    if result is None:
        return ""
    if not isinstance(result, dict):
        return str(result)[:60]
    if result.get("summary"):
        return str(result["summary"])
    plain = [f"{k} {v}" for k, v in result.items() if isinstance(v, (str, int, float, bool)) or v is None]
    return ", ".join(plain[:2])


def _key_words(key: object) -> str:
    if isinstance(key, dict):
        return " ".join(f"{k} {v}" for k, v in key.items())
    return str(key)


def _child(run: dict) -> StudyChild:
    """From one item of StudyRecord.summary()["runs"] (run_dir already resolved and checked)."""
    key = run.get("key")
    seed = key.get("seed") if isinstance(key, dict) else None
    return StudyChild(str(run["run_dir"]), int(run["position"]), str(run.get("role") or ""), _key_words(key), seed,
                      run.get("status"), run.get("verdict"), _anomaly(run.get("first_anomaly")))


def _anomaly(value: Any) -> dict | None:
    """A study index's first anomaly (a dict, or JSON text of one), else None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) and value else None


def read_study(folder: Path) -> StudyEntry:
    record = StudyRecord(folder)
    summary = record.summary()
    progress = summary.get("progress") or {}
    done, total = progress.get("done", 0), progress.get("total")
    return StudyEntry(str(record.path), record.study_id, record.kind, str(record.created_at or ""),
                      str(summary.get("status")), f"{done}/{total}" if total is not None else str(done),
                      result_words(summary.get("result")), summary.get("error"),
                      tuple(_child(run) for run in summary.get("runs") or ()))


def _stamp(folder: Path, names: tuple[str, ...] = DB_FILES) -> tuple[int, ...]:
    stamps = []
    for name in names:
        try:
            stamps.append(os.stat(folder / name).st_mtime_ns)
        except OSError:
            stamps.append(0)
    return tuple(stamps)


def read_entry(folder: Path, bundle: str = "") -> RunEntry:
    record = RunRecord(folder)
    problem = ""
    try:
        summary = record.summary()
    except RecordError as exc:  # the run reads, but not all of it (its final image is refused): listed, with why
        problem = one_line(exc)
        settings = record.settings
        summary = {"prompt": settings.get("prompt"), "seed": settings.get("seed"), "steps": settings.get("steps"),
                   "status": record.status, "verdict": record.verdict, "first_anomaly": record.first_anomaly}
    verdict = summary.get("verdict") or {}
    anomaly = summary.get("first_anomaly")
    return RunEntry(str(record.path), record.run_id, str(record.created_at or ""), str(summary.get("prompt") or ""),
                    summary.get("seed"), summary.get("steps"), str(summary.get("status")),
                    verdict.get("label") if isinstance(verdict, dict) else None, record.error,
                    tuple(intervention_words(record.settings)), anomaly if isinstance(anomaly, dict) else None,
                    summary.get("image"), bundle, problem)


def _subfolders(folder: Path) -> list[Path]:
    try:
        return [c for c in folder.iterdir() if c.is_dir()] if folder.is_dir() else []
    except OSError:
        return []


def bundle_runs(runs_dir: Path) -> list[tuple[Path, str]]:
    """(run folder, bundle name) of every run of the bundles extracted under <runs_dir>/bundles."""
    found = []
    for folder in _subfolders(runs_dir / BUNDLES_FOLDER):
        if is_bundle_folder(folder):
            found.extend((run, bundle_name(folder)) for run in _subfolders(folder / RUNS_FOLDER))
    return found


class HistoryModel(QObject):
    changed = Signal()

    def __init__(self, runs_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runs_dir = Path(runs_dir)
        self.entries: list[RunEntry] = []  # runs only
        self.studies: list[StudyEntry] = []
        self.broken: list[BrokenEntry] = []  # folders that cannot be read, with why
        self.rows: list[HistoryRow] = []  # runs, studies and unreadable folders, newest first: the panel's rows
        self.live_run: str | None = None
        self._cache: dict[str, tuple[tuple[int, ...], HistoryRow]] = {}

    def set_runs_dir(self, runs_dir: Path) -> None:
        self.runs_dir = Path(runs_dir)
        self._cache.clear()
        self.refresh()

    def set_live_run(self, run_dir: str | None) -> None:
        self.live_run = None if run_dir is None else str(Path(run_dir))
        self.changed.emit()

    def refresh(self) -> None:
        rows: list[HistoryRow] = []
        cache: dict[str, tuple[tuple[int, ...], HistoryRow]] = {}
        children = [(child, "") for child in _subfolders(self.runs_dir)] + bundle_runs(self.runs_dir)
        for child, bundle in children:
            reader: Callable[[Path], HistoryRow] = partial(read_entry, bundle=bundle)
            stamp = _stamp(child)
            if bundle and stamp == (0, 0):
                continue  # a bundle holds runs only
            if stamp == (0, 0):
                reader, stamp = read_study, _stamp(child, STUDY_DB_FILES)
                if stamp == (0, 0) and not looks_like_run(child):
                    continue  # neither a run nor a study folder (a run whose database is gone is listed)
                if stamp == (0, 0):
                    reader = read_entry  # a run without its database: the reader says so
            cached = self._cache.get(str(child))
            if cached is not None and cached[0] == stamp:
                row = cached[1]
            else:
                try:
                    row = reader(child)
                except (RecordError, OSError) as exc:
                    if writer_alive(child):
                        continue  # being created right now: the next refresh reads it
                    row = broken_entry(child, exc)
            cache[str(child)] = (stamp, row)
            rows.append(row)
        rows.sort(key=lambda e: (e.created, e.run_id), reverse=True)
        self._cache, self.rows = cache, rows
        self.entries = [r for r in rows if isinstance(r, RunEntry)]
        self.studies = [r for r in rows if isinstance(r, StudyEntry)]
        self.broken = [r for r in rows if isinstance(r, BrokenEntry)]
        self.changed.emit()

    def entry(self, path: str) -> RunEntry | None:
        return next((e for e in self.entries if e.path == str(Path(path))), None)

    def study(self, path: str) -> StudyEntry | None:
        return next((s for s in self.studies if s.path == str(Path(path))), None)

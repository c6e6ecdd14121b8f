"""The rows of the run history: a run (RunEntry), a study with its runs (StudyEntry, StudyChild), a folder that
cannot be read (BrokenEntry), each with the state the history shows; a study's result in words. history_scan.py
reads them from a runs folder, history_model.py holds them for the window; the names stay importable from there."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from ghostviewer.gui.models.verdict_words import run_words
from ghostviewer.record.study_reader import StudyRun


class RunEntry(NamedTuple):  # a tuple: no __dict__ for the collector to walk, and made ~4× faster than a frozen
    # dataclass (10,000 rows: ~10 ms, not ~40, on the history's worker)
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
    source: str = ""  # where the call was made when not by GhostViewer: "watched: app.py · call 7"

    def state(self, live_run: str | None) -> str:
        """What the history shows: the verdict label (with the first anomaly's kind when the image passed
        anyway, as the verdict badge says it), or running / incomplete / cancelled / failed."""
        if self.status in ("running", "interrupted"):  # interrupted: its writer died (the record can tell)
            return "running" if live_run == self.path else "incomplete"
        return run_words(self.status, self.verdict, self.first_anomaly) if self.status != "done" or self.verdict \
            else "done"


class StudyChild(NamedTuple):
    """One run of a study, as the study's index lists it (no need to open the run to show it). A tuple: a sweep's
    10,000 made ~4× faster than as a frozen dataclass."""

    path: str
    position: int
    role: str
    label: str  # the child's key in a few words, e.g. "seed 3"
    seed: object
    status: str | None
    verdict: str | None
    first_anomaly: dict | None = None
    run: RunEntry | None = None  # the child read as a run (a watch study's kept calls): thumbnail, prompt, seed

    def state(self) -> str:
        if self.run is not None:
            return self.run.state(None)
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
    source: str = ""  # a watch study's program ("app.py")
    failed: int = 0  # a watch study's calls with a bad verdict, an anomaly or an error

    @property
    def run_id(self) -> str:  # the tie-break key shared with RunEntry when sorting the history
        return self.study_id

    def state(self, live_run: str | None) -> str:
        """running (a run inside it is live) / incomplete (its writer stopped) / its final status; a watch study
        whose program is still running (it holds the study's lock): watching."""
        if self.status == "running" and self.kind == "watch":
            return "watching"
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


def watch_words(result: object) -> str:
    """A watch study's result in a few words, the failures first: "1/4 failed (25%), 4 kept"."""
    if not isinstance(result, dict) or not isinstance(result.get("calls"), int):
        return ""
    calls, failed, kept = result["calls"], int(result.get("failed") or 0), result.get("kept")
    rate = f" ({failed / calls:.0%})" if calls else ""
    return f"{failed}/{calls} failed{rate}" + (f", {kept} kept" if isinstance(kept, int) else "")


def _key_words(key: object) -> str:
    if isinstance(key, dict):
        return " ".join(f"{k} {v}" for k, v in key.items())
    return str(key)


def study_child(run: dict) -> StudyChild:
    """From one item of StudyRecord.summary()["runs"] (run_dir already resolved and checked)."""
    key = run.get("key")
    seed = key.get("seed") if isinstance(key, dict) else None
    return StudyChild(str(run["run_dir"]), int(run["position"]), str(run.get("role") or ""), _key_words(key), seed,
                      run.get("status"), run.get("verdict"), _anomaly(run.get("first_anomaly")))


def study_child_of(run: StudyRun) -> StudyChild:
    """From one of StudyRecord.runs() (as study_child, without the summary's dict and look at the run's folder)."""
    key = run.key
    seed = key.get("seed") if isinstance(key, dict) else None
    return StudyChild(str(run.run_dir), int(run.position), str(run.role or ""), _key_words(key), seed, run.status,
                      run.verdict, _anomaly(run.first_anomaly))


def _anomaly(value: Any) -> dict | None:
    """A study index's first anomaly (a dict, or JSON text of one), else None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) and value else None


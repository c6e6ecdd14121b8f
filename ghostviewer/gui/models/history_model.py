"""Every run and study in the runs folder, read from the records alone (no engine), cached by modification time.

A study is one row whose children are its runs (they live in the study's own folder, out of the top level).
The runs of bug-report bundles opened in the window (extracted into <runs_dir>/bundles/<name>-<time>/runs/<id>)
are rows too, tagged with their bundle's name. A run (or study) folder that cannot be read — a missing or corrupt
database — is a row too (BrokenEntry), with the reader's message; a run read but for a part it refused (a final
image pointing outside its folder) is a run row with that `problem`. Nothing in the runs folder is dropped silently.

A large runs folder (over LARGE_FOLDER entries: thousands of runs) is read off the GUI thread, newest folders
first, a screenful first and then CHUNK new records at a time: the rows read so far are shown at once and the
rest follow, so the window never waits on thousands of database opens (a refresh of a folder read before only
checks each folder's modification times, also off the GUI thread). A small folder is read in place, as before.

A watch study (the calls a watcher recorded in the user's own program: ghostviewer.watch, `ghostviewer record --`)
is one row with its calls, kept records and failure rate; its children are its kept calls only, newest first, each
read as a run (thumbnail, prompt, seed, "watched: app.py · call 7"; the newest CHILD_DETAIL of them, each read once).
**Watching a folder** (watch()): the folder is read again every POLL_MS, always off the GUI thread, while a program
writes runs into it; a read that finds nothing changed says nothing (the panel is left alone).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ghostviewer.gui.drops import looks_like_run
from ghostviewer.gui.link.worker import Task, Worker
from ghostviewer.gui.models.prompt_model import intervention_words
from ghostviewer.gui.models.verdict_words import run_words
from ghostviewer.record import RecordError, StudyRecord
from ghostviewer.record.bundle_format import MANIFEST, README, REPRO, RUNS_FOLDER
from ghostviewer.record.history import program_name, watched_words
from ghostviewer.record.lock import writer_alive
from ghostviewer.record.runs_index import RunRow, db_mtime, list_rows, read_row
from ghostviewer.record.runs_index import stamp as run_stamp
from ghostviewer.record.study_reader import SUMMARY_ROLE
from ghostviewer.record.study_schema import RUNS_FOLDER as STUDY_RUNS

log = logging.getLogger("ghostviewer.gui")

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
    source: str = ""  # where the call was made when not by GhostViewer: "watched: app.py · call 7"

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


LARGE_FOLDER = 400  # more entries than this: read off the GUI thread, in chunks
FIRST_CHUNK, CHUNK = 40, 400  # new records read in the first chunk (a screenful, fast), then in each next one
SHOW_AT_ONCE = 400  # more new rows than this from one read: the newest FIRST_CHUNK are shown first
# ... and the rest once the worker has made their history lines (the window paints the first ones meanwhile)
POLL_MS = 1000  # a watched folder is read again this often
Cache = dict[str, tuple[tuple[int, ...], HistoryRow]]
CHILD_DETAIL = 200  # a watch study's newest kept calls read as runs (the older ones: from its index alone)


def read_study(folder: Path, cache: Cache | None = None, new_cache: Cache | None = None) -> StudyEntry:
    """`cache` / `new_cache`: a watch study's kept calls read before (by their own modification times) / the
    ones read now go there."""
    record = StudyRecord(folder)
    summary = record.summary()
    progress = summary.get("progress") or {}
    done, total = progress.get("done", 0), progress.get("total")
    runs = summary.get("runs") or ()
    result = summary.get("result")
    source, failed, words = "", 0, result_words(result)
    if record.kind == "watch":
        source = program_name((summary.get("params") or {}).get("program"))
        failed = int(result.get("failed") or 0) if isinstance(result, dict) else 0
        words = watch_words(result) or result_words(result)
        kept = [run for run in reversed(runs) if run.get("kept") and run.get("role") != SUMMARY_ROLE]
        read = _watched_entries(folder, kept[:CHILD_DETAIL], cache, new_cache)
        children = tuple(_as_run(_child(run), read.get(str(run["run_dir"]))) for run in kept)
    else:
        children = tuple(_child(run) for run in runs)
    return StudyEntry(str(record.path), record.study_id, record.kind, str(record.created_at or ""),
                      str(summary.get("status")), f"{done}/{total}" if total is not None else str(done),
                      words, summary.get("error"), children, source, failed)


def _watched_entries(study: Path, runs: list[dict], cache: Cache | None,
                     new_cache: Cache | None) -> dict[str, RunEntry]:
    """A watch study's newest kept calls read as runs: from the cache while their databases are unchanged, else
    from the runs index of the study's runs/ folder (the writer keeps it; a call it lacks is read once)."""
    found: dict[str, RunEntry] = {}
    wanted: list[Path] = []
    for run in runs:
        folder = Path(run["run_dir"])
        cached = (cache or {}).get(str(folder))
        if cached is not None and cached[0] == _stamp(folder) and isinstance(cached[1], RunEntry):
            found[str(folder)] = cached[1]
        else:
            wanted.append(folder)
    if wanted:
        rows, unreadable, _ = list_rows(study / STUDY_RUNS, wanted, create=len(runs) >= CHILD_DETAIL)
        for folder, _stamp_now, row in rows:
            found[str(folder)] = entry_from_row(folder, row)
        for folder, problem in unreadable:
            log.info("a watched call's record cannot be read: %s: %s", folder, problem)
    if new_cache is not None:
        for path, entry in found.items():
            new_cache[path] = (_stamp(Path(path)), entry)
    return found


def _as_run(child: StudyChild, entry: RunEntry | None) -> StudyChild:
    return child if entry is None else StudyChild(child.path, child.position, child.role, child.label, entry.seed,
                                                  child.status, child.verdict, child.first_anomaly, entry)


def _stamp(folder: Path, names: tuple[str, ...] = DB_FILES) -> tuple[int, ...]:
    stamps = []
    for name in names:
        try:
            stamps.append(os.stat(folder / name).st_mtime_ns)
        except OSError:
            stamps.append(0)
    return tuple(stamps)


def read_entry(folder: Path, bundle: str = "") -> RunEntry:
    """One run read from its own record (what the runs index holds for it, read afresh)."""
    return entry_from_row(Path(folder), read_row(folder), bundle)


def entry_from_row(folder: Path, row: RunRow, bundle: str = "") -> RunEntry:
    """A history row from a runs-index row (record/runs_index.py): no database opened."""
    path = str(folder)
    return RunEntry(path, row.run_id, row.created_at, str(row.prompt or ""), row.seed, row.steps,
                    row.live_status(path), row.verdict, row.error,
                    tuple(intervention_words(row.settings)), row.first_anomaly, row.image_path(path), bundle,
                    row.problem, watched_words(row.watched) if row.watched else "")


def entry_count(folder: Path) -> int:
    """How many entries the folder holds (one directory listing, no stat of each)."""
    try:
        with os.scandir(folder) as entries:
            return sum(1 for _ in entries)
    except OSError:
        return 0


def scan(runs_dir: Path, cache: Cache, budget: int | None = None,
         task: Task | None = None) -> tuple[list[HistoryRow], Cache, bool]:
    """(rows newest first, the new cache, complete): every run, study and unreadable folder of `runs_dir`, read
    again only where its database changed. The folder's own runs come from its runs index (one query; only the
    runs it lacks or holds stale are opened, and written back). `budget`: open at most that many records (the
    newest-named folders first: run ids begin with their time) and leave the others for the next call (complete
    False). No Qt: it runs on a worker."""
    rows: list[HistoryRow] = []
    new_cache: Cache = {}
    children = [(child, "") for child in _subfolders(runs_dir)] + bundle_runs(runs_dir)
    children.sort(key=lambda pair: pair[0].name, reverse=True)
    left = budget
    complete = True
    own_runs: list[tuple[Path, int | None]] = []  # the folder's own runs not in the cache: from the runs index
    for child, bundle in children:
        if task is not None:
            task.check()
        if not bundle:  # one stat tells a run and dates it (a finished one's WAL is folded back in)
            mtime = db_mtime(child)
            if mtime is not None:
                cached = cache.get(str(child))
                if cached is not None and isinstance(cached[1], RunEntry) and \
                        cached[0] == run_stamp(child, cached[1].status, mtime):
                    new_cache[str(child)] = cached
                    rows.append(cached[1])
                else:
                    own_runs.append((child, mtime))
                continue
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
        cached = cache.get(str(child))
        if cached is not None and cached[0] == stamp and not _writer_gone(child, cached[1]):
            row = cached[1]
            if isinstance(row, StudyEntry):  # its calls read as runs stay read
                for each in row.children:
                    if each.run is not None and each.path in cache:
                        new_cache[each.path] = cache[each.path]
        elif left is not None and left <= 0:
            complete = False
            continue
        else:
            if left is not None:
                left -= 1
            try:
                row = read_study(child, cache, new_cache) if reader is read_study else reader(child)
            except (RecordError, OSError) as exc:
                if writer_alive(child):
                    continue  # being created right now: the next refresh reads it
                row = broken_entry(child, exc)
        new_cache[str(child)] = (stamp, row)
        rows.append(row)
    indexed, unreadable, not_read = list_rows(runs_dir, own_runs, left, None if task is None else task.check,
                                              create=len(children) > LARGE_FOLDER)
    complete = complete and not not_read
    for folder, stamp, index_row in indexed:
        entry = entry_from_row(folder, index_row)
        new_cache[str(folder)] = (stamp, entry)
        rows.append(entry)
    for folder, problem in unreadable:
        if not writer_alive(folder):  # one being created right now: the next refresh reads it
            rows.append(broken_entry(folder, problem))
    rows.sort(key=lambda e: (e.created, e.run_id), reverse=True)
    return rows, new_cache, complete


def _writer_gone(folder: Path, row: HistoryRow) -> bool:
    """A study read while its writer was alive whose writer is gone now (a watched program killed): its database
    has not changed, its status has (it reads 'interrupted')."""
    return isinstance(row, StudyEntry) and row.status == "running" and writer_alive(folder) is False


def _subfolders(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:  # the entries' own types: no stat of each
            return [Path(e.path) for e in entries if e.is_dir()]
    except OSError:
        return []


def bundle_runs(runs_dir: Path) -> list[tuple[Path, str]]:
    """(run folder, bundle name) of every run of the bundles extracted under <runs_dir>/bundles."""
    found = []
    for folder in _subfolders(runs_dir / BUNDLES_FOLDER):
        if is_bundle_folder(folder):
            found.extend((run, bundle_name(folder)) for run in _subfolders(folder / RUNS_FOLDER))
    return found


def _with_lines(read: tuple[list[HistoryRow], Cache, bool], lines: dict[str, tuple[HistoryRow, Any]],
                upto: int | None = None) -> tuple[list[HistoryRow], Cache, bool, dict]:
    """The read with the history line of each of its first `upto` rows (all: None), made again only for a row
    that changed: on the worker, so that thousands of new rows cost the GUI thread nothing to show."""
    from ghostviewer.gui.models.history_rows import line_of  # it imports this module

    made = {}
    for row in read[0][:upto]:
        before = lines.get(row.path)
        made[row.path] = before if before is not None and before[0] is row else (row, line_of(row, None))
    return (*read, made)


class HistoryModel(QObject):
    changed = Signal()
    watchingChanged = Signal(object)  # the folder now watched (refreshed every POLL_MS), or None

    def __init__(self, runs_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runs_dir = Path(runs_dir)
        self.entries: list[RunEntry] = []  # runs only
        self.studies: list[StudyEntry] = []
        self.broken: list[BrokenEntry] = []  # folders that cannot be read, with why
        self.rows: list[HistoryRow] = []  # runs, studies and unreadable folders, newest first: the panel's rows
        self.live_run: str | None = None
        self.lines: dict[str, tuple[HistoryRow, Any]] = {}  # row folder -> (row, its history line), made off
        # the GUI thread with the read (gui/models/history_rows.py; made with no live run)
        self._cache: Cache = {}
        self._reading: Path | None = None  # the folder a background read is reading
        self._worker = Worker(1, latest=True, what="reading the runs folder", expected=(RecordError, OSError),
                              parent=self)
        self._worker.answered.connect(self._on_read)
        self.watched: Path | None = None  # the folder watched (read again every POLL_MS), or None
        self._poll = QTimer(self, interval=POLL_MS)
        self._poll.timeout.connect(self._on_poll)

    def set_runs_dir(self, runs_dir: Path) -> None:
        """Show another runs folder (stopping a folder watch)."""
        self._stop_watching()
        self._set_folder(runs_dir)
        self.refresh()

    def _set_folder(self, runs_dir: Path) -> None:
        self.runs_dir = Path(runs_dir)
        self._cache, self._reading, self.lines = {}, None, {}

    def watch(self, folder: Path, interval_ms: int = POLL_MS) -> None:
        """Show `folder` and read it again every `interval_ms`, off the GUI thread, while a program writes runs
        into it; set_runs_dir() stops it."""
        changed = self.watched != Path(folder)
        self._set_folder(folder)
        self.watched = self.runs_dir
        self._poll.start(interval_ms)
        self._read_more()
        if changed:
            self.watchingChanged.emit(self.watched)

    def _stop_watching(self) -> None:
        if self.watched is not None:
            self._poll.stop()
            self.watched = None
            self.watchingChanged.emit(None)

    def _on_poll(self) -> None:
        if not self.loading:  # the read before still going: this tick is skipped, not queued
            self._read_more()

    def set_live_run(self, run_dir: str | None) -> None:
        self.live_run = None if run_dir is None else str(Path(run_dir))
        self.changed.emit()

    def refresh(self) -> None:
        """Read the runs folder again: in place when it is small, else off the GUI thread (rows as they come)."""
        if self.loading or self.watched is not None or entry_count(self.runs_dir) > LARGE_FOLDER:
            self._read_more()
            return
        self._apply(*scan(self.runs_dir, self._cache)[:2])

    @property
    def loading(self) -> bool:
        """A background read of a large folder is under way (`changed` comes again as its rows arrive)."""
        return self._reading is not None

    def _read_more(self) -> None:
        runs_dir, cache, lines = self.runs_dir, dict(self._cache), dict(self.lines)
        self._reading = runs_dir
        budget = FIRST_CHUNK if not self.rows else CHUNK
        known = len(self.rows)

        def read(task: Task) -> tuple[list[HistoryRow], Cache, bool, dict]:
            found = scan(runs_dir, cache, budget, task)
            many = len(found[0]) - known > SHOW_AT_ONCE  # a screenful's lines first, the others' next
            return _with_lines(found, lines, max(known, FIRST_CHUNK) if many else None)

        self._worker.submit(runs_dir, read)

    def _on_read(self, tag: Any, result: Any) -> None:
        rest = isinstance(tag, tuple)  # ("lines", folder): the lines of a large read's other rows
        runs_dir = tag[1] if rest else tag
        if runs_dir != self.runs_dir:
            return  # another folder was chosen meanwhile (its own read is under way)
        if isinstance(result, Exception):
            self._reading = None
            log.warning("cannot read the runs folder %s: %s", runs_dir, result)
            return
        rows, cache, complete, lines = result
        self.lines = lines
        if not rest and len(rows) - len(self.rows) > SHOW_AT_ONCE:  # thousands of new rows: a screenful first
            self._reading = runs_dir
            self._apply(rows[:max(len(self.rows), FIRST_CHUNK)], cache)
            made = dict(lines)
            self._worker.submit(("lines", runs_dir), lambda _task: _with_lines((rows, cache, complete), made))
            return
        self._reading = None if complete else runs_dir
        self._apply(rows, cache)
        if not complete:
            self._read_more()

    def _apply(self, rows: list[HistoryRow], cache: Cache) -> None:
        same = len(rows) == len(self.rows) and all(a is b for a, b in zip(rows, self.rows, strict=True))
        self._cache = cache
        if same and self.watched is not None:
            return  # a poll that found nothing new: the panel is left alone
        self.rows = rows
        self.entries = [r for r in rows if isinstance(r, RunEntry)]
        self.studies = [r for r in rows if isinstance(r, StudyEntry)]
        self.broken = [r for r in rows if isinstance(r, BrokenEntry)]
        self.changed.emit()

    def shutdown(self, timeout_ms: int = 2000) -> None:
        self._poll.stop()
        self._worker.shutdown(timeout_ms)

    def entry(self, path: str) -> RunEntry | None:
        return next((e for e in self.entries if e.path == str(Path(path))), None)

    def study(self, path: str) -> StudyEntry | None:
        return next((s for s in self.studies if s.path == str(Path(path))), None)

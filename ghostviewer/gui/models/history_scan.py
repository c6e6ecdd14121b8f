"""Reading a runs folder into history rows (history_entries.py), with no Qt — it runs on the GUI's Worker: every
run, study, extracted bug-report bundle's runs and unreadable folder, read again only where a database changed
(by modification times; a folder's own runs from its runs index), newest first, at most a budget of records a call.
A watch study's newest CHILD_DETAIL kept calls are read as runs. history_model.py says when and where."""

from __future__ import annotations

import gc
import logging
import os
import re
from collections.abc import Callable
from functools import partial
from operator import attrgetter, itemgetter
from pathlib import Path

from ghostviewer.gui.drops import looks_like_run
from ghostviewer.gui.link.worker import Task
from ghostviewer.gui.models.history_entries import (
    HistoryRow,
    RunEntry,
    StudyChild,
    StudyEntry,
    broken_entry,
    result_words,
    study_child_of,
    watch_words,
)
from ghostviewer.gui.models.prompt_model import intervention_words
from ghostviewer.record import RecordError, StudyRecord
from ghostviewer.record.bundle_format import MANIFEST, README, REPRO, RUNS_FOLDER
from ghostviewer.record.history import program_name, watched_words
from ghostviewer.record.lock import writer_alive
from ghostviewer.record.runs_index import RunRow, list_rows, newest_rows, read_row
from ghostviewer.record.runs_index import stamp as run_stamp
from ghostviewer.record.study_reader import SUMMARY_ROLE
from ghostviewer.record.study_schema import RUNS_FOLDER as STUDY_RUNS

log = logging.getLogger("ghostviewer.gui")

DB_FILES = ("run.sqlite", "run.sqlite-wal")
STUDY_DB_FILES = ("study.sqlite", "study.sqlite-wal")
BUNDLES_FOLDER = "bundles"  # where the window extracts the bundles it opens (gui/path_opener.py)
_EXTRACTED = re.compile(r"-\d{8}-\d{6}-[0-9a-f]{6}$")  # the time and token open_bundle adds to the name
LARGE_FOLDER = 400  # more entries than this: read off the GUI thread, in chunks
Cache = dict[str, tuple[tuple[int, ...], HistoryRow]]
CHILD_DETAIL = 200  # a watch study's newest kept calls read as runs (the older ones: from its index alone)


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


def read_study(folder: Path, cache: Cache | None = None, new_cache: Cache | None = None) -> StudyEntry:
    """`cache` / `new_cache`: a watch study's kept calls read before (by their own modification times) / the
    ones read now go there. A study's children come from its index alone (a sweep of 10,000 runs: one query, no
    look at each run's folder; a watch study's kept calls are looked at)."""
    record = StudyRecord(folder)
    summary = record.overview()
    progress = summary.get("progress") or {}
    done, total = progress.get("done", 0), progress.get("total")
    runs = record.runs()
    result = summary.get("result")
    source, failed, words = "", 0, result_words(result)
    if record.kind == "watch":
        source = program_name((summary.get("params") or {}).get("program"))
        failed = int(result.get("failed") or 0) if isinstance(result, dict) else 0
        words = watch_words(result) or result_words(result)
        kept = [run for run in reversed(runs) if run.role != SUMMARY_ROLE and run.kept]
        read = _watched_entries(folder, [{"run_dir": r.run_dir} for r in kept[:CHILD_DETAIL]], cache, new_cache)
        children = tuple(_as_run(study_child_of(run), read.get(str(run.run_dir))) for run in kept)
    else:
        children = tuple(study_child_of(run) for run in runs)
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


def entry_from_row(folder: Path | str, row: RunRow, bundle: str = "") -> RunEntry:
    """A history row from a runs-index row (record/runs_index.py): no database opened."""
    path = str(folder)
    run_id, created, status, prompt, seed, steps, verdict, anomaly, error, _, settings, watched, _, problem = row
    return _new_tuple(RunEntry, (  # the NamedTuple's own __new__ costs ~1 µs more a row (10,000 rows)
        path, run_id, created, str(prompt or ""), seed, steps,
        status if status != "running" else row.live_status(path), verdict, error,
        tuple(intervention_words(settings)) if settings else (), anomaly,
        row.image_path(path), bundle, problem, watched_words(watched) if watched else ""))


_new_tuple = tuple.__new__
_NEWEST = attrgetter("created", "run_id")  # the history's order (newest first: reversed)


def first_page(runs_dir: Path, limit: int) -> list[RunEntry]:
    """The newest `limit` runs of a large folder straight from its runs index (their stamps checked, no record
    opened), newest first: shown while every folder is looked at. [] where the folder has no index."""
    rows = [entry_from_row(folder, row) for folder, row in newest_rows(runs_dir, limit)]
    rows.sort(key=_NEWEST, reverse=True)
    return rows


def entry_count(folder: Path) -> int:
    """How many entries the folder holds (one directory listing, no stat of each)."""
    try:
        with os.scandir(folder) as entries:
            return sum(1 for _ in entries)
    except OSError:
        return 0


def scan(runs_dir: Path, cache: Cache, budget: int | None = None,
         task: Task | None = None) -> tuple[list[HistoryRow], Cache, bool]:
    """As _scan, with the cyclic collector paused: 10,000 rows made ran ~120 of its passes (~25-30 ms, each holding
    the GIL the window's thread waits on) over objects that all live on (the rows and their cache)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _scan(runs_dir, cache, budget, task)
    finally:
        if collecting:
            gc.enable()


def _scan(runs_dir: Path, cache: Cache, budget: int | None = None,
          task: Task | None = None) -> tuple[list[HistoryRow], Cache, bool]:
    """(rows newest first, the new cache, complete): every run, study and unreadable folder of `runs_dir`, read
    again only where its database changed. The folder's own runs come from its runs index (one query; only the
    runs it lacks or holds stale are opened, and written back). `budget`: open at most that many records (the
    newest-named folders first: run ids begin with their time) and leave the others for the next call (complete
    False). No Qt: it runs on a worker."""
    rows: list[HistoryRow] = []
    new_cache: Cache = {}
    own_runs: list[tuple[str, int | None]] = []  # the folder's own runs not in the cache: from the runs index
    others: list[tuple[Path, str]] = []  # studies, unknown folders, bundles' runs: (folder, its bundle's name)
    home = str(runs_dir)
    prefix = home if home.endswith(os.sep) else home + os.sep
    names = _subfolder_names(runs_dir)
    stat, tail = os.stat, os.sep + DB_FILES[0]
    for i, name in enumerate(names):  # path strings, not Paths: 10,000 Path objects cost ~0.1 s
        if task is not None and i % 500 == 0:
            task.check()
        child = prefix + name
        try:  # one stat tells a run and dates it (a finished one's WAL is folded back in)
            mtime = stat(child + tail).st_mtime_ns
        except OSError:
            others.append((Path(child), ""))
            continue
        cached = cache.get(child)
        if cached is not None and isinstance(cached[1], RunEntry) and \
                cached[0] == run_stamp(child, cached[1].status, mtime):
            new_cache[child] = cached
            rows.append(cached[1])
        else:
            own_runs.append((child, mtime))
    bundled = bundle_runs(runs_dir)
    others += bundled
    others.sort(key=lambda pair: pair[0].name, reverse=True)
    children_count = len(names) + len(bundled)
    left = budget
    complete = True
    for child, bundle in others:
        if task is not None:
            task.check()
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
    own_runs.sort(key=itemgetter(0), reverse=True)  # newest-named first (the budget reads those)
    indexed, unreadable, not_read = list_rows(runs_dir, own_runs, left, None if task is None else task.check,
                                              create=children_count > LARGE_FOLDER)
    complete = complete and not not_read
    for folder, stamp, index_row in indexed:
        entry = entry_from_row(folder, index_row)
        new_cache[str(folder)] = (stamp, entry)
        rows.append(entry)
    for folder, problem in unreadable:
        if not writer_alive(folder):  # one being created right now: the next refresh reads it
            rows.append(broken_entry(Path(folder), problem))
    rows.sort(key=_NEWEST, reverse=True)
    return rows, new_cache, complete


def _writer_gone(folder: Path, row: HistoryRow) -> bool:
    """A study read while its writer was alive whose writer is gone now (a watched program killed): its database
    has not changed, its status has (it reads 'interrupted')."""
    return isinstance(row, StudyEntry) and row.status == "running" and writer_alive(folder) is False


def _subfolder_names(folder: Path) -> list[str]:
    try:
        with os.scandir(folder) as entries:  # the entries' own types: no stat of each
            return [e.name for e in entries if e.is_dir()]
    except OSError:
        return []


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


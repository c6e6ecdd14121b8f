"""Every run and study in the runs folder, read from the records alone (no engine), cached by modification time.

A study is one row whose children are its runs (they live in the study's own folder, out of the top level).
The runs of bug-report bundles opened in the window (extracted into <runs_dir>/bundles/<name>-<time>/runs/<id>)
are rows too, tagged with their bundle's name. A run (or study) folder that cannot be read — a missing or corrupt
database — is a row too (BrokenEntry), with the reader's message; a run read but for a part it refused (a final
image pointing outside its folder) is a run row with that `problem`. Nothing in the runs folder is dropped silently.

A large runs folder (over LARGE_FOLDER entries: thousands of runs) is read off the GUI thread, newest folders
first, a screenful first and then CHUNK new records at a time: the rows read so far are shown at once and the
rest follow, so the window never waits on thousands of database opens (a refresh of a folder read before only
checks each folder's modification times, also off the GUI thread). A folder with a runs index shows its newest
FIRST_CHUNK rows from it at once (history_scan.first_page: a few ms), then every row in one step, with where each
row is (a Listing) made on the worker beside the read; no row's words are made until it is drawn (history_lines.Lines).
A small folder is read in place, as before.

A watch study (the calls a watcher recorded in the user's own program: ghostviewer.watch, `ghostviewer record --`)
is one row with its calls, kept records and failure rate; its children are its kept calls only, newest first, each
read as a run (thumbnail, prompt, seed, "watched: app.py · call 7"; the newest CHILD_DETAIL of them, each read once).
**Watching a folder** (watch()): the folder is read again every POLL_MS, always off the GUI thread, while a program
writes runs into it; a read that finds nothing changed says nothing (the panel is left alone).

The rows are history_entries.py's, the reading of a folder history_scan.py's; this file holds them for the window.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ghostviewer.gui.link.worker import Worker
from ghostviewer.gui.models.history_entries import (
    BrokenEntry,
    HistoryRow,
    RunEntry,
    StudyChild,
    StudyEntry,
    broken_entry,
    one_line,
    result_words,
    watch_words,
)
from ghostviewer.gui.models.history_scan import (
    BUNDLES_FOLDER,
    CHILD_DETAIL,
    DB_FILES,
    LARGE_FOLDER,
    STUDY_DB_FILES,
    Cache,
    bundle_name,
    bundle_of,
    bundle_runs,
    entry_count,
    entry_from_row,
    first_page,
    is_bundle_folder,
    read_entry,
    read_study,
    scan,
)
from ghostviewer.record import RecordError

# The rows (history_entries.py) and the folder's reading (history_scan.py) stay importable from here.
__all__ = [
    "BUNDLES_FOLDER",
    "CHILD_DETAIL",
    "CHUNK",
    "DB_FILES",
    "FIRST_CHUNK",
    "IN_PLACE_OPENS",
    "LARGE_FOLDER",
    "POLL_MS",
    "STUDY_DB_FILES",
    "BrokenEntry",
    "Cache",
    "HistoryModel",
    "HistoryRow",
    "RunEntry",
    "StudyChild",
    "StudyEntry",
    "broken_entry",
    "bundle_name",
    "bundle_of",
    "bundle_runs",
    "entry_count",
    "entry_from_row",
    "is_bundle_folder",
    "one_line",
    "read_entry",
    "read_study",
    "result_words",
    "scan",
    "watch_words",
]

log = logging.getLogger("ghostviewer.gui")

FIRST_CHUNK, CHUNK = 40, 400  # new records read in the first chunk (a screenful, fast), then in each next one
POLL_MS = 1000  # a watched folder is read again this often
SEARCH_AFTER_MS = 150  # the search texts of a large read's rows made this long after they are shown
IN_PLACE_OPENS = 20  # records a small folder's refresh opens on the GUI thread (~2 ms each), the rest off it


def _indexed(read: tuple[list[HistoryRow], Cache, bool]) -> tuple[list[HistoryRow], Cache, bool, Any]:
    """The read with where each of its rows is (history_lines.Listing), made on the worker: thousands of new rows
    then cost the GUI thread nothing per row to show (their lines are made when drawn)."""
    from ghostviewer.gui.models.history_lines import listing  # it imports this module

    return (*read, listing(read[0]))


class HistoryModel(QObject):
    changed = Signal()
    searchable = Signal()  # listing.search made (a large folder's rows' search texts, for the filter)
    watchingChanged = Signal(object)  # the folder now watched (refreshed every POLL_MS), or None

    def __init__(self, runs_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runs_dir = Path(runs_dir)
        self.entries: list[RunEntry] = []  # runs only
        self.studies: list[StudyEntry] = []
        self.broken: list[BrokenEntry] = []  # folders that cannot be read, with why
        self.rows: list[HistoryRow] = []  # runs, studies and unreadable folders, newest first: the panel's rows
        self.live_run: str | None = None
        self.listing: Any = None  # where each row is (history_lines.Listing), made on the worker with a large read
        self._searched: tuple[list[HistoryRow], list[str]] | None = None  # rows and the search texts made for them
        self._cache: Cache = {}
        self._reading: Path | None = None  # the folder a background read is reading
        self._paged: bool | None = None  # a large folder's newest rows shown from its runs index (first_page)
        # at its first read: True, or False when there were none (None: not tried yet)
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
        self._cache, self._reading, self.listing, self._paged, self._searched = {}, None, None, None, None

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
        """Read the runs folder again: in place when it is small, else off the GUI thread (rows as they come). A
        small folder whose records are not read yet (no runs index: hundreds of runs on a first launch) opens at
        most IN_PLACE_OPENS of them in place, the newest; the others are read off the GUI thread."""
        if self._first_read_under_way():
            return  # it answers this refresh too (begun a moment ago: the window's first refreshes)
        if self.loading or self.watched is not None or entry_count(self.runs_dir) > LARGE_FOLDER:
            self._read_more()
            return
        rows, cache, complete = scan(self.runs_dir, self._cache, IN_PLACE_OPENS)
        self._apply(rows, cache)
        if not complete:  # 300 records opened here froze the window ~1 s (2 busy cores)
            self._read_more()

    def _first_read_under_way(self) -> bool:
        """The folder's first read (its newest rows from its index, then every folder) is under way: a refresh
        then would start it again, its work so far lost. (Begun when the model was made instead, it slowed the
        window's making more than it gained: both are Python on one GIL.)"""
        return self.loading and self._paged is not None and not self._cache and self.watched is None

    @property
    def loading(self) -> bool:
        """A background read of a large folder is under way (`changed` comes again as its rows arrive)."""
        return self._reading is not None

    def _read_more(self) -> None:
        runs_dir, cache = self.runs_dir, dict(self._cache)
        self._reading = runs_dir
        if self._paged is None and not self._cache and self.watched is None:  # a folder's first read: its
            self._paged = True  # newest rows from its runs index at once (a few ms), then every folder looked at
            self._worker.submit(("page", runs_dir), lambda _task: _indexed((first_page(runs_dir, FIRST_CHUNK), {},
                                                                            False)))
            return
        budget = FIRST_CHUNK if not self.rows else CHUNK  # records opened (rows from the runs index: all at once)
        self._worker.submit(runs_dir, lambda task: _indexed(scan(runs_dir, cache, budget, task)))

    def _on_read(self, tag: Any, result: Any) -> None:
        kind = tag[0] if isinstance(tag, tuple) else "read"  # "page": the newest rows from the runs index
        runs_dir = tag[1] if kind != "read" else tag
        if runs_dir != self.runs_dir:
            return  # another folder was chosen meanwhile (its own read is under way)
        if kind == "search":
            if isinstance(result, tuple) and self.listing is not None and self.listing.rows is tag[2]:
                self.listing = self.listing._replace(search=result[0], studies=result[1], sensitive=result[2])
                self._searched = (tag[2], result[0])
                self.searchable.emit()
            return
        page = kind == "page"
        if isinstance(result, Exception):
            self._reading = None
            log.warning("cannot read the runs folder %s: %s", runs_dir, result)
            return
        rows, cache, complete, listing = result
        if page:  # shown, and the whole read next
            if rows:
                self.listing = listing
                self._apply(rows, self._cache)
            else:
                self._paged = False  # no index (or nothing in it): read as before, a screenful first
            self._read_more()
            return
        self.listing = listing
        self._reading = None if complete else runs_dir
        changed = rows is not self.rows
        self._apply(rows, cache)
        if not complete:
            self._read_more()
        elif changed and self.rows is rows and len(rows) > LARGE_FOLDER:
            QTimer.singleShot(SEARCH_AFTER_MS, self, lambda: self._search_next(rows))

    def _search_next(self, rows: list[HistoryRow]) -> None:
        """What the filter searches in each row, made on the worker once the rows are shown and drawn (begun with
        them, its Python held the GIL the first paint of 10,000 rows waited on: 35-140 ms instead of ~7; the
        filter's first pass over them then costs the GUI thread no formatting; a refresh meanwhile cancels it)."""
        if rows is not self.rows:
            return  # other rows meanwhile: theirs come after them
        from ghostviewer.gui.models.history_lines import searches  # it imports this module

        before = self._searched  # the last texts made: kept for the rows unchanged (a watched folder's new runs)
        self._worker.submit(("search", self.runs_dir, rows), lambda task: searches(rows, task.check, before))

    def _apply(self, rows: list[HistoryRow], cache: Cache) -> None:
        same = len(rows) == len(self.rows) and all(a is b for a, b in zip(rows, self.rows, strict=True))
        self._cache = cache
        if same and self.watched is not None:
            return  # a poll that found nothing new: the panel is left alone
        self.rows = rows
        if self.listing is not None and self.listing.rows is not rows:
            self.listing = None  # made for other rows
        self.entries, self.studies, self.broken = [], [], []
        kinds: dict[type, list] = {RunEntry: self.entries, StudyEntry: self.studies, BrokenEntry: self.broken}
        for row in rows:  # one pass (10,000 rows)
            kinds[type(row)].append(row)
        self.changed.emit()

    def shutdown(self, timeout_ms: int = 2000) -> None:
        self._poll.stop()
        self._worker.shutdown(timeout_ms)

    def entry(self, path: str) -> RunEntry | None:
        return next((e for e in self.entries if e.path == str(Path(path))), None)

    def study(self, path: str) -> StudyEntry | None:
        return next((s for s in self.studies if s.path == str(Path(path))), None)

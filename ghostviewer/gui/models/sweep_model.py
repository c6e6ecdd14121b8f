"""The sweep gallery's state: one sweep study read through its record (no engine, no torch), its runs filtered
and sorted, and its statistics (analysis/sweep_stats.py) — a Qt list model the gallery's thumbnail view shows;
SweepGridModel shows the same runs as a prompt × seed table (a seed that fails every prompt is a red column).

Roles: DisplayRole "seed 7 · nan", ToolTipRole the details, DecorationRole the final image (a QImage, scaled to
the largest cell, or None while it is decoded off the GUI thread: gallery_images.py — only the cells drawn ask, and a
bounded cache keeps a 10,000-run sweep's memory flat), and RUN_DIR / VERDICT / ANOMALY / FAILED for the delegate
that paints the badges. The grid's prompt numbers are counted once per read (its headers ask for them per row).

Reading: a study of more than LARGE_STUDY runs has its index read on the model's worker (its runs, their statistics
and prompts made there; the GUI thread takes the result in one step), a small one in place. Each refresh reads only
the index rows added since the last read (positions only grow), so a live sweep of 10,000 runs re-reads a few rows
a progress event, not 10,000; `rows_read` counts them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from PySide6.QtCore import (
    QAbstractListModel,
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QImage

from ghostviewer.analysis.sweep_stats import SweepStats, is_failure
from ghostviewer.gui.link.worker import Task, Worker
from ghostviewer.gui.models.gallery_images import GalleryImages
from ghostviewer.gui.models.verdict_words import run_words
from ghostviewer.record import RecordError, StudyRecord

RUN_DIR = Qt.ItemDataRole.UserRole + 1
VERDICT = Qt.ItemDataRole.UserRole + 2
ANOMALY = Qt.ItemDataRole.UserRole + 3
FAILED = Qt.ItemDataRole.UserRole + 4
ALL = ""  # a filter that lets everything through
SORTS = ("list order", "verdict", "first anomaly")
_PHASES = {"encode": 0, "denoise": 1, "decode": 2}
FAILED_TEXT = QColor("#e53935")  # headers of prompts and seeds with failures
_FINAL = os.sep + "images" + os.sep + "final.png"  # a run's final image, under its folder
Index = QModelIndex | QPersistentModelIndex
LARGE_STUDY = 400  # a study of more runs than this: its index read off the GUI thread


@dataclass(frozen=True, slots=True)  # no __dict__: a 10,000-run sweep is 10,000 fewer objects for the collector
class SweepEntry:
    position: int
    run_dir: str
    prompt: str
    seed: int
    verdict: str | None
    status: str | None
    first_anomaly: dict[str, Any] | None

    @property
    def failed(self) -> bool:
        return is_failure(self.verdict, self.first_anomaly, self.status)

    @property
    def label(self) -> str:
        return run_words(self.status, self.verdict, self.first_anomaly)

    @property
    def anomaly_words(self) -> str:
        a = self.first_anomaly
        if not a:
            return ""
        where = f"step {a['step']}" if a.get("step") is not None else str(a.get("phase", ""))
        return f"{a.get('kind')} in {a.get('module')} ({where})"

    def anomaly_rank(self) -> tuple[int, int, int]:
        """Earlier anomalies first (phase, step); runs without one last."""
        a = self.first_anomaly
        if not a:
            return (1, 9, 0)
        step = a.get("step")
        return (0, _PHASES.get(str(a.get("phase")), 3), -1 if step is None else int(step))


class Grid(NamedTuple):
    """The prompt × seed table of some runs (no Qt: a large study's is made on the worker, beside its read)."""

    prompts: list[str]
    seeds: list[int]
    cells: dict[tuple[int, int], SweepEntry]
    cell_of: dict[str, tuple[int, int]]  # run folder -> its cell


def grid_of(shown: list[SweepEntry], prompts: list[str]) -> Grid:
    """`shown` as a table: a row per prompt (in `prompts`' order, those shown only), a column per seed; a prompt
    listed twice shares its row (its first run of a seed is shown)."""
    kept = {e.prompt for e in shown}
    rows = [p for p in prompts if p in kept]
    seeds = sorted({e.seed for e in shown})
    row, column = {p: i for i, p in enumerate(rows)}, {s: j for j, s in enumerate(seeds)}
    cells: dict[tuple[int, int], SweepEntry] = {}
    for e in shown:
        cells.setdefault((row[e.prompt], column[e.seed]), e)
    return Grid(rows, seeds, cells, {e.run_dir: cell for cell, e in cells.items()})


class SweepRead(NamedTuple):
    """What one read of a sweep's index found (no Qt): the member runs added after `after`, up to `last`."""

    study_dir: str
    after: int  # the newest position known before this read (-1: none)
    last: int  # the newest position read
    status: str
    progress: dict[str, Any]
    entries: list[SweepEntry]
    rows: int  # index rows read
    stats: SweepStats | None  # the entries' statistics, made beside the read (a first read), else None
    prompts: list[str] | None = None  # the entries' prompts in list order (a first read)
    grid: Grid | None = None  # their table, unfiltered (a first read)
    labels: set[str] | None = None  # their verdict words (a first read)


def read_sweep(study_dir: str, after: int = -1, record: StudyRecord | None = None,
               task: Task | None = None) -> SweepRead:
    """The sweep's index rows after position `after` (all: -1); on the model's worker for a large study."""
    record = record or StudyRecord(study_dir)
    runs = record.runs(after=after)
    if task is not None:
        task.check()
    members = [r for r in runs if r.role == "member"]
    entries = [SweepEntry(r.position, str(r.run_dir), str(r.key.get("prompt", "")), int(r.key.get("seed") or 0),
                          r.verdict, r.status, r.first_anomaly) for r in members]
    stats = prompts = grid = labels = None
    if after < 0:  # a whole study: its statistics, table and verdict words made here too
        stats = SweepStats.from_rows((r.key, r.verdict, r.first_anomaly, r.status) for r in members)
        prompts = list(dict.fromkeys(e.prompt for e in entries))
        grid, labels = grid_of(entries, prompts), {e.label for e in entries}
    return SweepRead(study_dir, after, runs[-1].position if runs else after, record.status, record.progress,
                     entries, len(runs), stats, prompts, grid, labels)


class SweepModel(QAbstractListModel):
    changed = Signal()  # the study, its runs or the statistics changed (not just the filter)
    imagesArrived = Signal(list)  # the run folders whose final images were just decoded (their cells redrawn)

    def __init__(self, parent: QObject | None = None, synchronous: bool = False) -> None:
        """synchronous (tests): images decoded when asked for, not off the GUI thread."""
        super().__init__(parent)
        self.study_dir: str | None = None
        self.status = ""
        self.progress: dict[str, Any] = {"done": 0, "total": None}
        self.entries: list[SweepEntry] = []
        self.stats = SweepStats()
        self.verdict_filter, self.prompt_filter, self.seed_filter = ALL, ALL, ALL
        self.sort = SORTS[0]
        self._shown: list[SweepEntry] = []
        self._row_of: dict[str, int] = {}  # run folder -> its row in the list
        self._prompts: list[str] = []  # in list order, counted once per read
        self._numbers: dict[str, int] = {}
        self.images = GalleryImages(synchronous=synchronous, parent=self)
        self.images.decoded.connect(self._on_images)
        self.loading = False  # a large study's index is being read on the worker
        self.rows_read = 0  # index rows read so far (a live sweep's refresh reads only the new ones)
        self._last = -1  # the newest index position read
        self._again = False  # a refresh asked for while a read was under way
        self._ready: Grid | None = None  # the grid of every run, made beside the last whole read
        self._labels: set[str] = set()  # the runs' verdict words (the filter's choices), added to as runs come
        self._synchronous = synchronous
        self._reader = Worker(1, latest=True, synchronous=synchronous, what="reading the sweep's index",
                              expected=(RecordError, OSError), parent=self)
        self._reader.answered.connect(self._on_read)

    # -- the study ------------------------------------------------------------------------------
    def open_study(self, path: str | Path | StudyRecord) -> None:
        """Show a sweep study (RecordError when it is not one); filters are reset. A large one's runs come from the
        worker (`changed` follows; `loading` meanwhile). `path` may be the study opened already."""
        record = path if isinstance(path, StudyRecord) else StudyRecord(path)  # its kind and size
        path = record.path
        if record.kind != "sweep":
            raise RecordError(f"{Path(path).name} is a {record.kind} study, not a sweep")
        self.study_dir = str(record.path)
        self.verdict_filter, self.prompt_filter, self.seed_filter = ALL, ALL, ALL
        self.images.clear()
        self._reader.cancel()
        self.entries, self.stats, self._last, self.loading, self._ready = [], SweepStats(), -1, False, None
        self._labels = set()
        if record.last_position() >= LARGE_STUDY and not self._synchronous:
            self.status, self.progress = record.status, record.progress
            self._count_prompts()
            self._apply()
            self.changed.emit()
            self._read_later(self.study_dir, -1)
            return
        self.refresh(record)

    def refresh(self, record: StudyRecord | None = None) -> None:
        """Read the index rows added since the last read (one query): new runs appear, statistics follow.
        `record`: the study, opened already. A large study's rows are read on the worker."""
        if self.study_dir is None:
            return
        if self.loading:
            self._again = True  # the read under way started before this: another follows it
            return
        if record is None and len(self.entries) >= LARGE_STUDY and not self._synchronous:
            self._read_later(self.study_dir, self._last)
            return
        try:
            read = read_sweep(self.study_dir, self._last, record)
        except RecordError:
            return  # being written; the next refresh sees it
        self._take(read)

    def _read_later(self, study_dir: str, after: int) -> None:
        self.loading, self._again = True, False
        self._reader.submit((study_dir, after), lambda task: read_sweep(study_dir, after, task=task))

    def _on_read(self, tag: tuple[str, int], result: Any) -> None:
        if tag != (self.study_dir, self._last):
            return  # another study shown meanwhile
        self.loading = False
        if isinstance(result, SweepRead):
            self._take(result)
        if self._again:
            self.refresh()

    def _take(self, read: SweepRead) -> None:
        """A read's rows added to the model (the GUI thread: a few list operations, the statistics of a first
        read made on the worker already)."""
        self.status, self.progress, self._last = read.status, read.progress, read.last
        self.rows_read += read.rows
        if not read.entries and read.after >= 0 and self.entries:
            self.changed.emit()  # the progress and status only
            return
        if read.stats is not None:
            self.entries, self.stats = list(read.entries), read.stats
            self._labels = read.labels if read.labels is not None else {e.label for e in read.entries}
        else:
            self.entries = self.entries + read.entries
            for e in read.entries:
                self.stats.add(e.prompt, e.seed, e.verdict, e.first_anomaly, e.status)
                self._labels.add(e.label)
        if read.stats is None and self._appends(len(read.entries)):  # a live sweep's new runs: added at the end
            self._ready = None  # (nothing reset; the worker's table is of fewer runs now)
            known = len(self._prompts)
            self._prompts.extend(p for p in dict.fromkeys(e.prompt for e in read.entries) if p not in self._numbers)
            self._numbers.update((p, i) for i, p in enumerate(self._prompts[known:], known + 1))
            first = len(self._shown)
            self.beginInsertRows(QModelIndex(), first, first + len(read.entries) - 1)
            self._shown.extend(read.entries)
            self._row_of.update((e.run_dir, i) for i, e in enumerate(read.entries, first))
            self.endInsertRows()
            self.changed.emit()
            return
        self._count_prompts(read.prompts)
        self._ready = read.grid  # the table of every run, unfiltered, for the grid model
        self._apply()
        self.changed.emit()

    def _appends(self, new: int) -> bool:
        """`new` runs just added go at the end of the list as it is shown: no filter, list order, every run shown
        before them."""
        unfiltered = self.verdict_filter == self.prompt_filter == self.seed_filter == ALL
        return unfiltered and self.sort == SORTS[0] and 0 < len(self._shown) == len(self.entries) - new

    def ready_grid(self) -> Grid | None:
        """The table of the shown runs made on the worker with the read (every run shown, in list order), or
        None: the grid model makes it."""
        ready = self._ready
        unfiltered = self.sort == SORTS[0] and self.verdict_filter == self.prompt_filter == self.seed_filter == ALL
        return ready if ready is not None and unfiltered and len(self._shown) == len(self.entries) else None

    def _count_prompts(self, prompts: list[str] | None = None) -> None:
        self._prompts = list(dict.fromkeys(e.prompt for e in self.entries)) if prompts is None else prompts
        self._numbers = {p: i for i, p in enumerate(self._prompts, 1)}

    def clear(self) -> None:
        self._reader.cancel()
        self.study_dir, self.entries, self.stats, self.status = None, [], SweepStats(), ""
        self._last, self.loading, self._ready, self._labels = -1, False, None, set()
        self._count_prompts()
        self._apply()
        self.changed.emit()

    # -- filter and sort -------------------------------------------------------------------------
    def set_filter(self, verdict: str | None = None, prompt: str | None = None, seed: str | None = None) -> None:
        """verdict: a label, "failed", "ok" or ALL; prompt: one prompt or ALL; seed: a number or ALL."""
        if verdict is not None:
            self.verdict_filter = verdict
        if prompt is not None:
            self.prompt_filter = prompt
        if seed is not None:
            self.seed_filter = seed.strip()
        self._apply()

    def set_sort(self, sort: str) -> None:
        self.sort = sort if sort in SORTS else SORTS[0]
        self._apply()

    def _keep(self, e: SweepEntry) -> bool:
        v = self.verdict_filter
        if v == "failed" and not e.failed or v not in (ALL, "failed") and e.label != v:
            return False
        if self.prompt_filter != ALL and e.prompt != self.prompt_filter:
            return False
        return self.seed_filter == ALL or str(e.seed) == self.seed_filter

    def _apply(self) -> None:
        unfiltered = self.verdict_filter == self.prompt_filter == self.seed_filter == ALL
        shown = list(self.entries) if unfiltered else [e for e in self.entries if self._keep(e)]
        if self.sort == "verdict":
            shown.sort(key=lambda e: (not e.failed, e.label, e.position))
        elif self.sort == "first anomaly":
            shown.sort(key=lambda e: (e.anomaly_rank(), not e.failed, e.position))
        self.beginResetModel()
        self._shown = shown
        self._row_of = {e.run_dir: i for i, e in enumerate(shown)}
        self.endResetModel()

    def verdicts(self) -> list[str]:
        return sorted(self._labels)

    def prompts(self) -> list[str]:
        return list(self._prompts)

    def number(self, prompt: str) -> int:
        """The prompt's number in the list (1-based, as in the rate table and chart); 0 when unknown."""
        return self._numbers.get(prompt, 0)

    def healthy_twin(self, run_dir: str) -> str | None:
        """A healthy run of the same prompt (the nearest seed) to compare a failing one with; None if none."""
        entry = next((e for e in self.entries if e.run_dir == run_dir), None)
        if entry is None:
            return None
        twins = [e for e in self.entries if e.prompt == entry.prompt and not e.failed and e.run_dir != run_dir]
        return min(twins, key=lambda e: abs(e.seed - entry.seed)).run_dir if twins else None

    def shown(self) -> list[SweepEntry]:
        return list(self._shown)

    # -- Qt list model ---------------------------------------------------------------------------
    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 - Qt's name and default
        return 0 if parent.isValid() else len(self._shown)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._shown):
            return None
        return self.entry_data(self._shown[index.row()], role)

    def entry_data(self, e: SweepEntry, role: int) -> Any:
        """One run's data for a role (the list and the grid model answer the same)."""
        if role == Qt.ItemDataRole.DisplayRole:
            return f"seed {e.seed} · {e.label}"
        if role == Qt.ItemDataRole.ToolTipRole:
            lines = [e.prompt, f"seed {e.seed}: {e.label}"]
            return "\n".join([*lines, f"first anomaly: {e.anomaly_words}"] if e.first_anomaly else lines)
        if role == Qt.ItemDataRole.DecorationRole:
            return self.image(e.run_dir)
        if role == RUN_DIR:  # each paint of a cell asks for these: only the one asked for is worked out
            return e.run_dir
        if role == VERDICT:
            return e.label
        if role == FAILED:
            return e.failed
        if role == ANOMALY:
            return e.anomaly_words
        return None

    def image(self, run_dir: str) -> QImage | None:
        """The run's final image when decoded (a null image when it has none); None while it is decoded off the
        GUI thread (imagesArrived follows)."""
        return self.images.get(run_dir + _FINAL)  # a run folder's path string: no Path parsed per paint

    def _on_images(self, paths: list[str]) -> None:
        run_dirs = [path[:-len(_FINAL)] if path.endswith(_FINAL) else str(Path(path).parents[1]) for path in paths]
        rows = [self._row_of[r] for r in run_dirs if r in self._row_of]
        if rows:  # one signal for the batch: the view redraws what it shows of that range
            role = [Qt.ItemDataRole.DecorationRole]
            self.dataChanged.emit(self.index(min(rows)), self.index(max(rows)), role)
        self.imagesArrived.emit(run_dirs)


_HEADER_ROLES = frozenset({Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.ForegroundRole,
                           Qt.ItemDataRole.TextAlignmentRole})


class SweepGridModel(QAbstractTableModel):
    """The runs the SweepModel shows (its filters apply) as a table: a row per prompt, in list order, a column
    per seed. Headers carry the prompt's number and failure rate, and the seed; those with failures in red.
    A prompt listed twice shares its row (its first run of a seed is shown)."""

    def __init__(self, runs: SweepModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runs = runs
        self.prompts: list[str] = []
        self.seeds: list[int] = []
        self._cells: dict[tuple[int, int], SweepEntry] = {}
        self._cell_of: dict[str, tuple[int, int]] = {}  # run folder -> its cell
        self._headers: dict[tuple[Any, int, int], Any] = {}  # (orientation, section, role) -> what headerData said
        runs.modelReset.connect(self._rebuild)
        runs.rowsInserted.connect(self._on_appended)
        runs.imagesArrived.connect(self._on_images)
        self._rebuild()

    def _rebuild(self) -> None:
        grid = self.runs.ready_grid() or grid_of(self.runs.shown(), self.runs.prompts())
        self._headers.clear()
        self.beginResetModel()
        self.prompts, self.seeds, self._cells, self._cell_of = grid
        self.endResetModel()

    def _on_appended(self, _parent: Index, first: int, last: int) -> None:
        """A live sweep's new runs (the list's rows first..last): each in its cell, a new prompt a row at the end,
        a seed after the others a column at the end; one the table cannot take so (a seed among the others) made
        again whole."""
        added = self.runs.shown()[first:last + 1]
        self._headers.clear()  # their failure rates changed
        rows = {p: i for i, p in enumerate(self.prompts)}
        new_prompts = [p for p in dict.fromkeys(e.prompt for e in added) if p not in rows]
        known = set(self.seeds)
        new_seeds = sorted({e.seed for e in added} - known)
        if new_seeds and self.seeds and new_seeds[0] < self.seeds[-1]:
            self._rebuild()
            return
        if new_prompts:
            self.beginInsertRows(QModelIndex(), len(self.prompts), len(self.prompts) + len(new_prompts) - 1)
            self.prompts = self.prompts + new_prompts
            rows.update((p, i) for i, p in enumerate(self.prompts))
            self.endInsertRows()
        if new_seeds:
            self.beginInsertColumns(QModelIndex(), len(self.seeds), len(self.seeds) + len(new_seeds) - 1)
            self.seeds = self.seeds + new_seeds
            self.endInsertColumns()
        column = {s: j for j, s in enumerate(self.seeds)}
        cells = [(rows[e.prompt], column[e.seed], e) for e in added]
        for row, col, e in cells:
            if (row, col) not in self._cells:
                self._cells[row, col] = e
                self._cell_of[e.run_dir] = (row, col)
                self.dataChanged.emit(self.index(row, col), self.index(row, col))
        for orientation, sections in ((Qt.Orientation.Vertical, [c[0] for c in cells]),
                                      (Qt.Orientation.Horizontal, [c[1] for c in cells])):
            self.headerDataChanged.emit(orientation, min(sections), max(sections))  # their failure rates

    def _on_images(self, run_dirs: list[str]) -> None:
        cells = [self._cell_of[r] for r in run_dirs if r in self._cell_of]
        if cells:
            rows, columns = [c[0] for c in cells], [c[1] for c in cells]
            self.dataChanged.emit(self.index(min(rows), min(columns)), self.index(max(rows), max(columns)),
                                  [Qt.ItemDataRole.DecorationRole])

    def entry(self, row: int, column: int) -> SweepEntry | None:
        return self._cells.get((row, column))

    def number(self, prompt: str) -> int:
        """The prompt's number in the list (1-based, as in the rate table and chart); 0 when unknown."""
        return self.runs.number(prompt)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 - Qt's name and default
        return 0 if parent.isValid() else len(self.prompts)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 - Qt's name and default
        return 0 if parent.isValid() else len(self.seeds)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        e = self._cells.get((index.row(), index.column())) if index.isValid() else None
        return None if e is None else self.runs.entry_data(e, role)

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802 - Qt's name
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role not in _HEADER_ROLES:  # most of what the headers ask as they lay out and paint: at once
            return None
        key = (orientation, section, role)
        if key in self._headers:  # asked again at each paint and fit (a 100 × 100 grid: thousands of times)
            return self._headers[key]
        value = self._headers[key] = self._header(section, orientation, role)
        return value

    def _header(self, section: int, orientation: Qt.Orientation, role: int) -> Any:
        horizontal = orientation == Qt.Orientation.Horizontal
        keys: list[Any] = self.seeds if horizontal else self.prompts
        if not 0 <= section < len(keys):
            return None
        tally = (self.runs.stats.by_seed if horizontal else self.runs.stats.by_prompt).get(keys[section])
        failed, total = (tally.failed, tally.total) if tally is not None else (0, 0)
        if role == Qt.ItemDataRole.DisplayRole:
            if horizontal:
                return str(keys[section])
            return f"{self.number(keys[section])}  {100 * failed / total:.0f} %" if total else str(section + 1)
        if role == Qt.ItemDataRole.ToolTipRole:
            what = f"seed {keys[section]}" if horizontal else keys[section]
            return f"{what}: {failed}/{total} failed"
        if role == Qt.ItemDataRole.ForegroundRole and failed:
            return FAILED_TEXT
        if role == Qt.ItemDataRole.TextAlignmentRole:
            right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
            return Qt.AlignmentFlag.AlignCenter if horizontal else right
        return None

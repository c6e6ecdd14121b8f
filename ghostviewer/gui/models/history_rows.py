"""The Runs history as a Qt item model: studies (their member runs as children) and runs, over plain lines.

A Line is what one history row shows — its six texts, tooltips and colours, its folder, kind and final image —
made from a HistoryModel row by `line_of` (no Qt: the history's worker makes them off the GUI thread, beside
its read). HistoryRows serves the lines to a QTreeView; the view asks only for the rows on screen, so a
thumbnail is read only when its row is drawn, off the GUI thread (gallery_images.py: the newest wishes first, a
batch at a time): a page scrolled into view is drawn at once, its thumbnails a moment later, and the GUI thread
never waits on a PNG. The filter is an index list: the rows
(and study children) whose texts hold the needle, a study shown when it or one of its runs matches.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QImage, QPixmap, QStandardItem, QStandardItemModel

from ghostviewer.gui import messages
from ghostviewer.gui.models.gallery_images import BATCH, GalleryImages
from ghostviewer.gui.models.history_model import BrokenEntry, HistoryRow, RunEntry, StudyChild, StudyEntry
from ghostviewer.gui.models.timeline_model import anomaly_words

STATE_COLOURS = {"ok": "#2e7d32", "done": "#2e7d32", "running": "#1565c0", "watching": "#1565c0",
                 "incomplete": "#ef6c00",
                 "cancelled": "#757575", "-": "#757575"}
BAD_COLOUR = "#c62828"
WARN_COLOUR = "#a86400"  # the image passed, something inside did not (the verdict badge's "warn")
UNREADABLE_COLOUR = "#8a8a8a"
BUNDLE_COLOUR = "#6a1b9a"
WATCHED_COLOUR = "#00695c"  # a call made by the user's own program
PATH_ROLE = Qt.ItemDataRole.UserRole
KIND_ROLE = Qt.ItemDataRole.UserRole + 1  # "run", "study", "child" or "broken"
PROBLEM_ROLE = Qt.ItemDataRole.UserRole + 2  # what cannot be read in the row's folder ("" when nothing)
IMAGE_ROLE = Qt.ItemDataRole.UserRole + 3  # a run row's final image (its thumbnail)
SEARCH_ROLE = Qt.ItemDataRole.UserRole + 5  # the row's texts in lower case, as the filter searches them
HEADERS = ("When", "Result", "Seed", "Steps", "Prompt", "First anomaly")
COLUMNS = len(HEADERS)
THUMB_PX = 24
THUMB_CACHE = 2000  # thumbnails kept (the rows drawn last)
SERVED = frozenset({Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.DecorationRole, Qt.ItemDataRole.ForegroundRole,
                    Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.SizeHintRole, Qt.ItemDataRole.FontRole, PATH_ROLE,
                    KIND_ROLE, PROBLEM_ROLE, IMAGE_ROLE, SEARCH_ROLE})
# the roles as plain ints: a paint asks ~300 times a page, and comparing with a Qt enum member costs ~10x an int's
_DISPLAY, _DECORATION, _FOREGROUND, _TOOLTIP, _SIZE_HINT, _FONT = (int(role) for role in (
    Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.DecorationRole, Qt.ItemDataRole.ForegroundRole,
    Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.SizeHintRole, Qt.ItemDataRole.FontRole))
_PATH, _KIND, _PROBLEM, _IMAGE, _SEARCH = (int(role) for role in (PATH_ROLE, KIND_ROLE, PROBLEM_ROLE, IMAGE_ROLE,
                                                                   SEARCH_ROLE))
_SERVED = frozenset(int(role) for role in SERVED)
NO_COLOURS: tuple[str | None, ...] = (None,) * COLUMNS
NO_TIPS: tuple[str, ...] = ("",) * COLUMNS


class Line(NamedTuple):
    path: str
    kind: str  # "run", "study", "child" or "broken"
    texts: tuple[str, ...]
    tips: tuple[str, ...] = NO_TIPS
    colours: tuple[str | None, ...] = NO_COLOURS
    problem: str = ""
    image: str | None = None
    children: tuple[Line, ...] = ()
    search: str = ""  # the texts in lower case, as the filter searches them

    @property
    def bold(self) -> bool:  # a study's prompt column
        return self.kind == "study"


_WHEN: dict[str, str] = {}  # a minute and its zone -> its words (runs made in the same minute share them)
_DIGITS = ".0123456789"


def when_words(created: str) -> str:
    """'11-30 08:43' from an ISO time (in local time when it names its zone): the date and the time, always."""
    key = created[:16] + created[19:].lstrip(_DIGITS)  # the minute and the zone: the seconds do not show
    words = _WHEN.get(key)
    if words is not None:
        return words
    try:
        t = datetime.fromisoformat(created).astimezone()  # ~15 µs (localtime): once a minute, not once a run
    except ValueError:
        return f"{created[5:10]} {created[11:16]}".strip()
    words = f"{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}"  # strftime costs 4× this (10,000 rows)
    if len(_WHEN) < 50_000:
        _WHEN[key] = words
    return words


def time_words(created: str) -> str:
    """'08:43:07' (local time): a study child's, under its study's date."""
    try:
        t = datetime.fromisoformat(created).astimezone()
        return f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    except ValueError:
        return created[11:19]


def state_colour(state: str) -> str:
    return WARN_COLOUR if state.startswith("ok · ") else STATE_COLOURS.get(state, BAD_COLOUR)


def live_sensitive(row: HistoryRow) -> bool:
    """The row's words depend on which run is live (it may be 'running' or 'incomplete')."""
    if isinstance(row, RunEntry):
        return row.status in ("running", "interrupted")
    return isinstance(row, StudyEntry) and row.status == "running" and row.kind != "watch"


def line_of(row: HistoryRow, live_run: str | None) -> Line:
    if isinstance(row, StudyEntry):
        return _study_line(row, live_run)
    if isinstance(row, BrokenEntry):
        return _broken_line(row)
    return _run_line(row, live_run)


def _searched(line: Line) -> Line:
    return line._replace(search=" ".join(line.texts).lower())


def _run_parts(entry: RunEntry, live_run: str | None, when: str | None = None,
               call: str | None = None) -> tuple[tuple[str, ...], str, str, str]:
    """(the row's texts, its state, its changes' words, its first anomaly's words)."""
    state = entry.state(live_run)
    changes = f"[{' · '.join(entry.changes)}] " if entry.changes else ""
    tag = f"[bundle {entry.bundle}] " if entry.bundle else ""
    source = f"{call} · " if call else f"[{entry.source}] " if entry.source else ""
    anomaly = anomaly_words(entry.first_anomaly) if entry.first_anomaly else ""
    warning = "⚠ " if entry.problem else ""
    texts = (when_words(entry.created) if when is None else when, warning + state, str(entry.seed),
             str(entry.steps), source + tag + changes + entry.prompt, anomaly)
    return texts, state, changes, anomaly


def _run_line(entry: RunEntry, live_run: str | None, when: str | None = None, call: str | None = None,
              path: str | None = None, tip0: str | None = None) -> Line:
    """`when`, `call`: a study's child (a watch study's kept call: its time, "call 7")."""
    texts, state, changes, anomaly = _run_parts(entry, live_run, when, call)
    origin = f"\nfrom the bug report {entry.bundle} (a read-only copy in {Path(entry.path).parents[1]})" \
        if entry.bundle else ""
    where = f"\n{entry.source}: a call made by that program, recorded by its watcher" if entry.source else ""
    why = "\n".join(filter(None, (entry.problem, entry.error))) or entry.path
    prompt = f"[{entry.source}] " * bool(entry.source) + changes + entry.prompt + origin + where
    tips = (entry.created if tip0 is None else tip0, why, "", "", prompt,
            f"first anomaly: {anomaly}" if anomaly else "no anomaly")
    colours = (None, state_colour(state), None, None,
               WARN_COLOUR if entry.changes else BUNDLE_COLOUR if entry.bundle else WATCHED_COLOUR if entry.source
               else None, BAD_COLOUR if anomaly else None)
    return Line(entry.path if path is None else path, "run" if when is None else "child", texts, tips, colours,
                entry.problem, entry.image, search=" ".join(texts).lower())


def search_of(row: HistoryRow, live_run: str | None) -> str:
    """What the filter searches in a row (its line's `search`), made without the rest of its line for a run:
    the filter's first pass over 10,000 runs whose lines were never made (~3 µs a run, not ~9)."""
    if isinstance(row, RunEntry):
        return " ".join(_run_parts(row, live_run)[0]).lower()
    return line_of(row, live_run).search


def _broken_line(entry: BrokenEntry) -> Line:
    folder = Path(entry.path)
    short = entry.problem.replace(str(folder.resolve()), folder.name).replace(str(folder), folder.name)
    texts = (when_words(entry.created), entry.state(), "", "", messages.HISTORY_UNREADABLE.format(problem=short), "")
    tip = f"{entry.problem}\n{entry.path}"
    return _searched(Line(entry.path, "broken", texts, (tip,) * COLUMNS, (UNREADABLE_COLOUR,) * COLUMNS,
                          entry.problem))


def _study_line(study: StudyEntry, live_run: str | None) -> Line:
    state = study.state(live_run)
    watch = study.kind == "watch"
    kind = f"{study.kind} {study.source}" if study.source else study.kind
    if watch:  # the failures in sight in a narrow dock; what the study is doing said in words
        kind = f"{'watching' if state == 'watching' else 'watch'} {study.source}" + \
            (f" ({state})" if state not in ("watching", "done") else "")
    text = f"{kind}: {study.result}" if study.result else kind
    result = f"{study.failed}/{study.progress} failed" if watch and study.progress != "0" else state
    texts = (when_words(study.created), result, "", study.progress, text, "")
    tip1 = "\n".join(filter(None, (f"{state}: {study.result}" if watch else "", study.error, study.path)))
    if watch:
        tip3 = f"{study.progress} calls watched"
        tip4 = (f"the calls of {study.source} (watch study {study.study_id}, {state}): {study.result}\n"
                "its children are the calls whose full record was kept")
    else:
        tip3, tip4 = f"{study.progress} runs done", f"{study.kind} study {study.study_id}: {study.result}"
    colours = (None, (BAD_COLOUR if study.failed else STATE_COLOURS["ok"]) if result != state else state_colour(state),
               None, None, BAD_COLOUR if study.failed else STATE_COLOURS["watching"] if state == "watching" else None,
               None)
    children = tuple(_child_line(child) for child in study.children)
    return _searched(Line(study.path, "study", texts, (study.created, tip1, "", tip3, tip4, ""), colours,
                          children=children))


def _child_line(child: StudyChild) -> Line:
    if child.run is not None:  # a watch study's kept call, read as a run
        return _run_line(child.run, None, when=time_words(child.run.created), call=child.label, path=child.path,
                         tip0=f"#{child.position} · {child.run.created}")
    state = child.state()
    seed = "" if child.seed is None else str(child.seed)
    texts = (f"#{child.position}", state, seed, "", f"{child.role}: {child.label}", "")
    return _searched(Line(child.path, "child", texts, ("", child.path, "", "", child.label, ""),
                          (None, state_colour(state), None, None, None, None)))


class Lines:
    """Every row's line, each made when it is first asked for — the rows the view draws, the ones the window or a
    test reads — and kept: a folder of 10,000 runs costs nothing per row to show (the view needs their count and
    whether a row has children, not their words). The filter's first pass makes only each row's search text
    (search_of). A line made before, for the same row (the same object) and, where its words depend on the live
    run, for the same live run, is taken from the Lines before (a refresh, a watched folder's new rows)."""

    def __init__(self, rows: list[HistoryRow], live_run: str | None = None, before: Lines | None = None,
                 listing: Listing | None = None) -> None:
        """`listing`: the worker's, for these rows (each row's search text, the studies' lines, when made)."""
        self.rows, self.live_run = rows, live_run
        self._lines: list[Line | None] = [None] * len(rows)
        self._search: list[str | None] | None = None  # made at the filter's first pass
        self.given: list[str] | None = None  # each row's search text, made on the worker (no live run)
        self._sensitive: list[int] = []  # the places of the rows whose words depend on the live run
        self.made: dict[str, tuple[HistoryRow, Line]] = {}  # row folder -> (row, its line): the lines made
        self._before: dict[str, tuple[HistoryRow, Line]] = {}
        if before is not None:
            self._before = dict(before._before)
            self._before.update(before.made)
            if before.live_run != live_run:
                self._before = {p: m for p, m in self._before.items() if not live_sensitive(m[0])}
        self.formatted = 0  # lines formatted here (not taken from before): what a test counts
        if listing is not None:
            self.take(listing)

    def take(self, listing: Listing) -> None:
        """The worker's search texts and studies' lines for these rows (made with no live run)."""
        if listing.rows is not self.rows or listing.search is None:
            return
        self.given, self._sensitive = listing.search, listing.sensitive or []
        for path, (row, line) in (listing.studies or {}).items():
            if not (self.live_run and live_sensitive(row)):
                self._before.setdefault(path, (row, line))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, place: int) -> Line:
        line = self._lines[place]
        if line is None:
            if place < 0:
                place += len(self.rows)
            row = self.rows[place]
            before = self._before.get(row.path)
            if before is not None and before[0] is row:
                line = before[1]
            else:
                line = line_of(row, self.live_run)
                self.formatted += 1
            self._lines[place] = line
            self.made[row.path] = (row, line)
        return line

    def __iter__(self) -> Iterator[Line]:
        return (self[place] for place in range(len(self.rows)))

    def path(self, place: int) -> str:
        return self.rows[place].path

    def child_count(self, place: int) -> int:
        row = self.rows[place]
        return len(row.children) if isinstance(row, StudyEntry) else 0

    def child_path(self, place: int, child: int) -> str:
        return self.rows[place].children[child].path  # type: ignore[union-attr] - a study's

    def all_search(self) -> list[str]:
        """Every row's search text, in order (the worker's, where it made them: nothing made here)."""
        given = self.given
        if given is None:
            return [self.search(place) for place in range(len(self.rows))]
        if not self.live_run or not self._sensitive:
            return given
        out = list(given)
        for place in self._sensitive:
            out[place] = self.search(place)
        return out

    def search(self, place: int) -> str:
        """The row's texts in lower case, as the filter searches them."""
        line = self._lines[place]
        if line is not None:
            return line.search
        if self._search is None:
            self._search = [None] * len(self.rows)
        text = self._search[place]
        if text is None:
            row, given = self.rows[place], self.given
            text = self._search[place] = given[place] if given is not None and not (
                self.live_run and live_sensitive(row)) else search_of(row, self.live_run)
        return text


class Listing(NamedTuple):
    """Where each of `rows` is, made beside a read on the history's worker: thousands of rows then cost the GUI
    thread nothing per row to show; and, made on the worker next, what the filter searches in each."""

    rows: list[HistoryRow]  # the rows (the same objects, in the same order)
    top: dict[str, int]  # as HistoryRows._top
    child: dict[str, tuple[int, int]]  # as HistoryRows._child
    search: list[str] | None = None  # search_of(row, None) of each row
    studies: dict[str, tuple[HistoryRow, Line]] | None = None  # the studies' lines (their children searched too)
    sensitive: list[int] | None = None  # the places of the rows whose words depend on the live run


def searches(rows: list[HistoryRow], check: Callable[[], None] | None = None,
             before: tuple[list[HistoryRow], list[str]] | None = None
             ) -> tuple[list[str], dict[str, tuple[HistoryRow, Line]], list[int]]:
    """(search_of(row, None) of every row, the studies' whole lines, the places of the rows whose words depend on
    the live run) — on the history's worker, once a large folder's rows are shown: the filter's first pass then
    formats nothing on the GUI thread (a sweep of 10,000 runs: its children's texts). `before`: rows and their
    texts made before, kept for the same row objects."""
    known = {row.path: (row, text) for row, text in zip(*before, strict=True)} if before is not None else {}
    out, studies, sensitive = [], {}, []
    for place, row in enumerate(rows):
        if check is not None and place % 500 == 0:
            check()
        if live_sensitive(row):
            sensitive.append(place)
        kept = known.get(row.path)
        if kept is not None and kept[0] is row and type(row) is not StudyEntry:
            out.append(kept[1])
        elif type(row) is StudyEntry:
            line = line_of(row, None)
            studies[row.path] = (row, line)
            out.append(line.search)
        else:
            out.append(search_of(row, None))
    return out, studies, sensitive


def listing(rows: list[HistoryRow]) -> Listing:
    return Listing(rows, *index_rows(rows))


def index_rows(rows: list[HistoryRow]) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """(a row's folder -> its place, a study child's folder -> (its study's place, its place))."""
    top: dict[str, int] = {}
    child: dict[str, tuple[int, int]] = {}
    for place, row in enumerate(rows):
        top.setdefault(row.path, place)
        if type(row) is StudyEntry:
            for j, kid in enumerate(row.children):
                child.setdefault(kid.path, (place, j))
    return top, child


_BRUSHES: dict[str, QBrush] = {}


def _brush(colour: str) -> QBrush:
    brush = _BRUSHES.get(colour)
    if brush is None:
        brush = _BRUSHES[colour] = QBrush(QColor(colour))
    return brush


def _under(run: str, folder: str) -> bool:
    return run == folder or run.startswith(folder + os.sep)


class HistoryRows(QStandardItemModel):
    """The lines as a two-level tree of the shown rows (the filter's index list). It holds no item for a row: a
    standard model of that many empty rows (an item only for a study with runs, to hold their empty rows) keeps
    the view's layout of thousands of rows in C++ (a Python model's index() and hasChildren() for each row cost
    ~100 ms at 10,000), and data() serves the lines, for the rows drawn only."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.lines: Lines = Lines([])
        self.needle = ""
        self._shown: list[int] = []  # the places in `lines` of the rows shown, in order
        self._shown_children: dict[int, list[int]] = {}  # a study's shown children (filtered); absent: all
        self._row_of: dict[int, int] = {}  # place in `lines` -> shown row (filtered); empty: the same
        self._top: dict[str, int] = {}  # a row's folder -> its place in `lines`
        self._child: dict[str, tuple[int, int]] = {}  # a study child's folder -> (its study's place, its place)
        self._flat = True  # no shown row has children (data() needs no index.parent())
        self.row_size = QSize(THUMB_PX, THUMB_PX + 2)
        self._thumbs: OrderedDict[str, QIcon | None] = OrderedDict()  # final image → its thumbnail (None:
        # unreadable), the THUMB_CACHE drawn last: 10,000 rows scrolled through keep memory (and the collector) flat
        self._waiting: dict[str, list[QPersistentModelIndex]] = {}  # images being read, for the rows drawn
        self.images = GalleryImages(2 * BATCH, parent=self, size=THUMB_PX)  # decoded off the GUI thread
        self.images.decoded.connect(self._on_thumbnails)
        self._bold = QFont()
        self._bold.setBold(True)
        self.setColumnCount(COLUMNS)  # from the start, and always: the header keeps its widths through resets

    # -- contents ---------------------------------------------------------------------------------------
    def set_lines(self, lines: Lines, index: tuple[dict[str, int], dict[str, tuple[int, int]]] | None = None
                  ) -> None:
        """`index`: index_rows(lines.rows), when made already (on the worker)."""
        self.lines = lines
        self._top, self._child = index if index is not None else index_rows(lines.rows)
        self._select()
        self._lay_out()

    def set_needle(self, needle: str) -> None:
        self.needle = needle
        self._select()
        self._lay_out()

    def _lay_out(self) -> None:
        """Empty rows for the shown lines (a reset: the view lays them out again, in C++)."""
        self.beginResetModel()
        self.blockSignals(True)  # the rows made inside one reset
        try:
            self.setRowCount(0)
            self.setRowCount(len(self._shown))
            lines = self.lines
            studies = [(row, place) for row, place in enumerate(self._shown) if lines.child_count(place)] \
                if any(type(r) is StudyEntry for r in lines.rows) else []
            self._flat = not studies  # no row has children: every index is a top-level row's
            for row, place in studies:
                kids = self._shown_children.get(place)
                item = QStandardItem()
                item.setColumnCount(COLUMNS)
                item.setRowCount(lines.child_count(place) if kids is None else len(kids))
                self.setItem(row, 0, item)
        finally:
            self.blockSignals(False)
        self.endResetModel()

    def _select(self) -> None:
        needle = self.needle
        self._shown_children = {}
        if not needle:
            self._shown, self._row_of = list(range(len(self.lines))), {}
            return
        lines = self.lines
        texts = lines.all_search()
        parents = {place for place, row in enumerate(lines.rows) if type(row) is StudyEntry and row.children}
        if not parents:  # runs only (10,000 of them): one pass in a comprehension
            self._shown = [place for place, text in enumerate(texts) if needle in text]
            self._row_of = {place: row for row, place in enumerate(self._shown)}
            return
        shown: list[int] = []
        for place, text in enumerate(texts):
            own = needle in text
            if not own and place in parents:
                kids = [j for j, child in enumerate(lines[place].children) if needle in child.search]
                if kids:
                    self._shown_children[place] = kids
                    shown.append(place)
            elif own:
                shown.append(place)
        self._shown = shown
        self._row_of = {place: row for row, place in enumerate(shown)}

    def thumbnail(self, path: str | None) -> QIcon | None:
        """The image's thumbnail, read now if it was not (None: no image, or unreadable)."""
        if not path:
            return None
        if path in self._thumbs:
            self._thumbs.move_to_end(path)
            return self._thumbs[path]
        image = QImage(path)
        return self._keep(path, image if image.isNull() else image.scaled(
            THUMB_PX, THUMB_PX, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.FastTransformation))

    def _keep(self, path: str, image: QImage) -> QIcon | None:
        icon = self._thumbs[path] = None if image.isNull() else QIcon(QPixmap.fromImage(image))
        if len(self._thumbs) > THUMB_CACHE:
            self._thumbs.popitem(last=False)
        return icon

    def _thumbnail_later(self, path: str, index: QModelIndex | QPersistentModelIndex) -> QIcon | None:
        """The thumbnail if read; else it is decoded off the GUI thread (a page scrolled into view does not wait
        on its images) and its row drawn again when it comes."""
        if path in self._thumbs:
            self._thumbs.move_to_end(path)
            return self._thumbs[path]
        waiting = self._waiting.setdefault(path, [])
        if len(waiting) < 4:  # each paint of the row asks again while it is decoded: its row is enough
            waiting.append(QPersistentModelIndex(index))
        if len(self._waiting) > THUMB_CACHE:  # rows scrolled past long ago: asked again when drawn
            self._waiting.pop(next(iter(self._waiting)))
        image = self.images.get(path)
        if image is not None:  # decoded already for a row drawn before (the cache of a few batches)
            self._waiting.pop(path, None)
            return self._keep(path, image)
        return None

    def _on_thumbnails(self, paths: list[str]) -> None:
        for path in paths:
            indexes = self._waiting.pop(path, None)
            image = self.images.get(path) if indexes is not None else None
            if image is None or self._keep(path, image) is None:
                continue
            for index in indexes:
                if index.isValid():
                    self.dataChanged.emit(index, index, [Qt.ItemDataRole.DecorationRole])

    # -- where rows are ---------------------------------------------------------------------------------
    def place(self, path: str) -> tuple[int, int] | None:
        """(the row's place in `lines`, -1) or (its study's place, the child's place), or None."""
        if path in self._top:
            return self._top[path], -1
        return self._child.get(path)

    def child_place(self, path: str) -> tuple[int, int] | None:
        """(its study's place, its place) of a study child's folder, or None."""
        return self._child.get(path)

    def is_shown(self, top: int, child: int = -1) -> bool:
        if self.needle:
            if top not in self._row_of:
                return False
            kids = self._shown_children.get(top)
            return child < 0 or kids is None or child in kids
        return 0 <= top < len(self.lines)

    def index_at(self, top: int, child: int = -1, column: int = 0) -> QModelIndex:
        """The index of a line (shown) or an invalid one."""
        if not self.is_shown(top, child):
            return QModelIndex()
        row = self._row_of.get(top, top) if self.needle else top
        if child < 0:
            return self.index(row, column)
        kids = self._shown_children.get(top)
        return self.index(child if kids is None else kids.index(child), column, self.index(row, 0))

    def index_of(self, path: str | None, column: int = 0) -> QModelIndex:
        where = None if path is None else self.place(path)
        return QModelIndex() if where is None else self.index_at(*where, column)

    def line(self, index: QModelIndex | QPersistentModelIndex) -> Line | None:
        place = self.place_of(index)
        if place is None:
            return None
        top, child = place
        return self.lines[top] if child < 0 else self.lines[top].children[child]

    def place_of(self, index: QModelIndex | QPersistentModelIndex) -> tuple[int, int] | None:
        if not index.isValid():
            return None
        parent = index.parent()
        if not parent.isValid():
            return (self._shown[index.row()] if self.needle else index.row()), -1
        top = self._shown[parent.row()] if self.needle else parent.row()
        kids = self._shown_children.get(top)
        return top, index.row() if kids is None else kids[index.row()]

    # -- the model's data ----------------------------------------------------------------------------
    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> object:  # noqa: N802
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole and section < COLUMNS:
            return HEADERS[section]
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = _DISPLAY) -> object:
        if role not in _SERVED:  # most of what a paint asks (alignment, background, check state...): at once
            return None
        if self._flat:  # every row top-level: no parent() to ask (~300 calls a page drawn)
            if not index.isValid():
                return None
            top = index.row()
            line = self.lines[self._shown[top] if self.needle else top]
        else:
            line = self.line(index)
            if line is None:
                return None
        if role == _DISPLAY:
            return line.texts[index.column()]
        if role == _DECORATION:  # asked for the rows drawn only
            return self._thumbnail_later(line.image, index) if index.column() == 0 and line.image else None
        return self.line_data(line, index.column(), role)

    def line_data(self, line: Line, column: int, role: int) -> object:
        role = int(role)
        if role == _DISPLAY:
            return line.texts[column]
        if role == _DECORATION:
            return self.thumbnail(line.image) if column == 0 and line.image else None
        if role == _FOREGROUND:
            colour = line.colours[column]
            return _brush(colour) if colour else None
        if role == _TOOLTIP:
            return line.tips[column] or None
        if role == _SIZE_HINT:
            return self.row_size if column == 0 else None
        if role == _FONT:
            return self._bold if column == 4 and line.bold else None
        if column != 0:
            return None
        if role == _PATH:
            return line.path
        if role == _KIND:
            return line.kind
        if role == _PROBLEM:
            return line.problem
        if role == _IMAGE:
            return line.image
        if role == _SEARCH:
            return line.search
        return None

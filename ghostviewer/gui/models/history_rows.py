"""The Runs history as a Qt item model: studies (their member runs as children) and runs, over plain lines.

A Line is what one history row shows (history_lines.py: plain data, made off the GUI thread or when first
drawn). HistoryRows serves the lines to a QTreeView; the view asks only for the rows on screen, so a
thumbnail is read only when its row is drawn, off the GUI thread (gallery_images.py: the newest wishes first, a
batch at a time): a page scrolled into view is drawn at once, its thumbnails a moment later, and the GUI thread
never waits on a PNG. The filter is an index list: the rows
(and study children) whose texts hold the needle, a study shown when it or one of its runs matches.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QImage, QPixmap, QStandardItem, QStandardItemModel

from ghostviewer.gui.models.gallery_images import BATCH, GalleryImages
from ghostviewer.gui.models.history_lines import COLUMNS, HEADERS, Line, Lines, index_rows
from ghostviewer.gui.models.history_model import StudyEntry

PATH_ROLE = Qt.ItemDataRole.UserRole
KIND_ROLE = Qt.ItemDataRole.UserRole + 1  # "run", "study", "child" or "broken"
PROBLEM_ROLE = Qt.ItemDataRole.UserRole + 2  # what cannot be read in the row's folder ("" when nothing)
IMAGE_ROLE = Qt.ItemDataRole.UserRole + 3  # a run row's final image (its thumbnail)
SEARCH_ROLE = Qt.ItemDataRole.UserRole + 5  # the row's texts in lower case, as the filter searches them
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

"""The Runs history's QTreeView over HistoryRows, with the QTreeWidget calls the window and the tests make
(topLevelItem, currentItem, setCurrentItem, itemAt, visualItemRect, scrollToItem, selectedItems): they answer with
HistoryItem handles — a row named by its folder (and its study's, for a study's run), resolved on each call, so a
handle stays good across refreshes and filters. A handle of a row hidden by the filter is hidden (isHidden)."""

from __future__ import annotations

from PySide6.QtCore import QItemSelection, QItemSelectionModel, QModelIndex, QPoint, QRect, Qt
from PySide6.QtGui import QBrush, QFont, QIcon
from PySide6.QtWidgets import QAbstractItemView, QTreeView, QWidget

from ghostviewer.gui.models.history_lines import COLUMNS, Line
from ghostviewer.gui.models.history_rows import HistoryRows

Key = tuple[str, str | None]  # (the top-level row's folder, the study child's folder or None)
ROWS = QItemSelectionModel.SelectionFlag.Rows


class HistoryItem:
    """One history row, as a QTreeWidgetItem reads (text, data, toolTip, foreground, child...)."""

    def __init__(self, tree: HistoryTree, key: Key) -> None:
        self._tree, self.key = tree, key

    def place(self) -> tuple[int, int] | None:
        rows = self._tree.rows
        top_path, child_path = self.key
        top = rows.place(top_path)
        if top is None or top[1] >= 0:
            return None
        if child_path is None:
            return top[0], -1
        indexed = rows.child_place(child_path)
        if indexed is not None and indexed[0] == top[0]:
            return indexed
        lines = rows.lines
        j = next((j for j in range(lines.child_count(top[0])) if lines.child_path(top[0], j) == child_path), None)
        return None if j is None else (top[0], j)

    def line(self) -> Line | None:
        place = self.place()
        if place is None:
            return None
        line = self._tree.rows.lines[place[0]]
        return line if place[1] < 0 else line.children[place[1]]

    def index(self, column: int = 0) -> QModelIndex:
        place = self.place()
        return QModelIndex() if place is None else self._tree.rows.index_at(*place, column)

    def text(self, column: int) -> str:
        line = self.line()
        return "" if line is None else line.texts[column]

    def toolTip(self, column: int) -> str:  # noqa: N802 - QTreeWidgetItem's name
        line = self.line()
        return "" if line is None else line.tips[column]

    def data(self, column: int, role: int) -> object:
        line = self.line()
        if line is None:
            return None
        return self._tree.rows.line_data(line, column, role)

    def foreground(self, column: int) -> QBrush:
        brush = self.data(column, Qt.ItemDataRole.ForegroundRole)
        return brush if isinstance(brush, QBrush) else QBrush()

    def font(self, column: int) -> QFont:
        font = self.data(column, Qt.ItemDataRole.FontRole)
        return font if isinstance(font, QFont) else QFont()

    def icon(self, column: int) -> QIcon:
        icon = self.data(column, Qt.ItemDataRole.DecorationRole)
        return icon if isinstance(icon, QIcon) else QIcon()

    def childCount(self) -> int:  # noqa: N802
        line = self.line()
        return 0 if line is None or self.key[1] is not None else len(line.children)

    def child(self, j: int) -> HistoryItem | None:
        line = self.line()
        if line is None or self.key[1] is not None or not 0 <= j < len(line.children):
            return None
        return self._tree.item((self.key[0], line.children[j].path))

    def parent(self) -> HistoryItem | None:
        return None if self.key[1] is None else self._tree.item((self.key[0], None))

    def isHidden(self) -> bool:  # noqa: N802
        place = self.place()
        return place is None or not self._tree.rows.is_shown(*place)

    def isExpanded(self) -> bool:  # noqa: N802
        index = self.index()
        return index.isValid() and self._tree.isExpanded(index)

    def setExpanded(self, expanded: bool) -> None:  # noqa: N802
        index = self.index()
        if index.isValid():
            self._tree.setExpanded(index, expanded)

    def isSelected(self) -> bool:  # noqa: N802
        index = self.index()
        return index.isValid() and self._tree.selectionModel().isRowSelected(index.row(), index.parent())

    def setSelected(self, selected: bool) -> None:  # noqa: N802
        index = self.index()
        if index.isValid():
            flag = QItemSelectionModel.SelectionFlag.Select if selected else QItemSelectionModel.SelectionFlag.Deselect
            self._tree.selectionModel().select(index, flag | ROWS)

    def __repr__(self) -> str:
        return f"HistoryItem{self.key}"


class HistoryTree(QTreeView):
    def __init__(self, rows: HistoryRows, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows = rows
        self._handles: dict[Key, HistoryItem] = {}  # one handle per row (the same object across refreshes)
        self.setModel(rows)
        self.setUniformRowHeights(True)
        self.setRootIsDecorated(True)
        self.setSortingEnabled(False)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)

    def item(self, key: Key) -> HistoryItem:
        handle = self._handles.get(key)
        if handle is None:
            handle = self._handles[key] = HistoryItem(self, key)
        return handle

    def key_of(self, index: QModelIndex) -> Key | None:
        place = self.rows.place_of(index)
        if place is None:
            return None
        lines = self.rows.lines
        top = lines.path(place[0])
        return (top, None) if place[1] < 0 else (top, lines.child_path(*place))

    def item_of_index(self, index: QModelIndex) -> HistoryItem | None:
        key = self.key_of(index)
        return None if key is None else self.item(key)

    def forget_handles(self) -> None:
        """Drop the handles of rows gone (a refresh)."""
        live = self.rows._top
        self._handles = {k: h for k, h in self._handles.items() if k[0] in live}

    # -- QTreeWidget's calls ----------------------------------------------------------------------------
    def topLevelItemCount(self) -> int:  # noqa: N802
        return len(self.rows.lines)

    def topLevelItem(self, i: int) -> HistoryItem | None:  # noqa: N802
        return self.item((self.rows.lines.path(i), None)) if 0 <= i < len(self.rows.lines) else None

    def currentItem(self) -> HistoryItem | None:  # noqa: N802
        return self.item_of_index(self.currentIndex())

    def setCurrentItem(self, item: HistoryItem | None) -> None:  # noqa: N802
        self.setCurrentIndex(QModelIndex() if item is None else item.index())

    def itemAt(self, *point: object) -> HistoryItem | None:  # noqa: N802
        where = point[0] if len(point) == 1 else QPoint(*point)  # type: ignore[arg-type]
        return self.item_of_index(self.indexAt(where))  # type: ignore[arg-type]

    def visualItemRect(self, item: HistoryItem) -> QRect:  # noqa: N802
        index = item.index()
        if not index.isValid():
            return QRect()
        return self.visualRect(index).united(self.visualRect(index.siblingAtColumn(COLUMNS - 1)))

    def scrollToItem(self, item: HistoryItem,  # noqa: N802
                     hint: QAbstractItemView.ScrollHint = QAbstractItemView.ScrollHint.EnsureVisible) -> None:
        index = item.index()
        if index.isValid():
            self.scrollTo(index, hint)

    def selectedItems(self) -> list[HistoryItem]:  # noqa: N802
        found = (self.item_of_index(i) for i in self.selectionModel().selectedRows())
        return [i for i in found if i is not None]

    def select_keys(self, keys: list[Key]) -> None:
        """Select these rows (those shown), the selection before dropped."""
        selection = QItemSelection()
        for key in keys:
            index = self.item(key).index()
            if index.isValid():
                selection.select(index, index.siblingAtColumn(COLUMNS - 1))
        self.selectionModel().select(selection, QItemSelectionModel.SelectionFlag.ClearAndSelect)

"""Runs history: every run in the runs folder, newest first, filterable; bound to HistoryModel."""

from __future__ import annotations

from datetime import date

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QMenu,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.models.history_model import HistoryModel

STATE_COLOURS = {"ok": "#2e7d32", "running": "#1565c0", "incomplete": "#ef6c00", "cancelled": "#757575"}
BAD_COLOUR = "#c62828"


class HistoryPanel(QWidget):
    runSelected = Signal(str)  # run folder
    replayRequested = Signal(str)

    def __init__(self, model: HistoryModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.filter = QLineEdit(placeholderText="filter by prompt, seed or result", clearButtonEnabled=True)
        self.refresh_button = QPushButton("Refresh")
        self.tree = QTreeWidget(rootIsDecorated=False, uniformRowHeights=True, sortingEnabled=False)
        self.tree.setHeaderLabels(["When", "Result", "Seed", "Steps", "Prompt"])
        for column, width in enumerate((66, 62, 44, 40)):
            self.tree.setColumnWidth(column, width)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        top = QHBoxLayout()
        top.addWidget(self.filter)
        top.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(top)
        layout.addWidget(self.tree)
        model.changed.connect(self._rebuild)
        self.filter.textChanged.connect(self._apply_filter)
        self.refresh_button.clicked.connect(model.refresh)
        self.tree.currentItemChanged.connect(self._on_current)
        self.tree.customContextMenuRequested.connect(self._menu)
        self._rebuild()

    def _rebuild(self) -> None:
        current = self.tree.currentItem()
        keep = current.data(0, Qt.ItemDataRole.UserRole) if current is not None else None
        today = date.today().isoformat()
        self.tree.blockSignals(True)
        self.tree.clear()
        for entry in self.model.entries:
            state = entry.state(self.model.live_run)
            when = entry.created[11:19] if entry.created[:10] == today else entry.created[:10]
            item = QTreeWidgetItem([when, state, str(entry.seed),
                                    str(entry.steps), entry.prompt])
            item.setData(0, Qt.ItemDataRole.UserRole, entry.path)
            item.setToolTip(0, entry.created)
            item.setToolTip(4, entry.prompt)
            item.setToolTip(1, entry.error or entry.path)
            item.setForeground(1, QBrush(QColor(STATE_COLOURS.get(state, BAD_COLOUR))))
            self.tree.addTopLevelItem(item)
            if entry.path == keep:
                self.tree.setCurrentItem(item)
        self.tree.blockSignals(False)
        self._apply_filter(self.filter.text())

    def _apply_filter(self, text: str) -> None:
        needle = text.strip().lower()
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            haystack = " ".join(item.text(c) for c in range(5)).lower()
            item.setHidden(bool(needle) and needle not in haystack)

    def select(self, path: str) -> None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, Qt.ItemDataRole.UserRole) == path:
                self.tree.setCurrentItem(item)
                return

    def _on_current(self, item: QTreeWidgetItem | None, _previous: QTreeWidgetItem | None) -> None:
        if item is not None:
            self.runSelected.emit(str(item.data(0, Qt.ItemDataRole.UserRole)))

    def _menu(self, position) -> None:  # noqa: ANN001 - QPoint
        item = self.tree.itemAt(position)
        if item is None:
            return
        path = str(item.data(0, Qt.ItemDataRole.UserRole))
        menu = QMenu(self)
        menu.addAction("Open", lambda: self.runSelected.emit(path))
        menu.addAction("Replay this seed", lambda: self.replayRequested.emit(path))
        menu.exec(self.tree.viewport().mapToGlobal(position))

"""The shown run's event log from its record: a search box (FTS5, or a substring when the query is not valid
FTS), a level filter and a time/level/kind/message table. Bound to TimelineModel (follows the shown run); the
events are read off the GUI thread (a Worker), the newest query winning.

Plain words match as prefixes, as one types: `nan lat` finds "NaN in the latents" (FTS `"nan"* "lat"*`); a query
with FTS syntax of its own (quotes, `*`, AND/OR/NOT/NEAR, parentheses) is passed on as written."""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.link.worker import Worker
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import Event, RecordError, RunRecord

LEVELS = ("all", "info", "warning", "error")
COLUMNS = ("time", "level", "kind", "message")
FTS_SYNTAX = ('"', "*", "(", ")", "^")
FTS_OPERATORS = {"AND", "OR", "NOT", "NEAR"}


def prefix_query(text: str) -> str | None:
    """The FTS query for what the user typed: each plain word a prefix; None for an empty box."""
    words = text.split()
    if not words:
        return None
    if any(mark in text for mark in FTS_SYNTAX) or FTS_OPERATORS & set(words):
        return text.strip()
    return " ".join(f'"{word}"*' for word in words)


def event_time(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


def read_events(record: RunRecord, query: str | None, level: str | None) -> list[Event]:
    """The run's events matching the query and level; [] when they cannot be read now (a worker calls this)."""
    try:
        return record.events(search=query, level=level)
    except RecordError:
        return []


class RunEventsView(QWidget):
    def __init__(self, timeline: TimelineModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.timeline = timeline
        self.search = QLineEdit(placeholderText="Search the run's events (words match as you type)",
                                clearButtonEnabled=True)
        self.level = QComboBox(toolTip="Show only events of this level")
        self.level.addItems(LEVELS)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 4)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        bar = QHBoxLayout()
        bar.addWidget(self.search, 1)
        bar.addWidget(self.level)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.table, 1)
        self.events: list[Event] = []
        self._wanted: tuple[Any, ...] | None = None  # (run, status, query, level) being read
        self._reader = Worker(1, latest=True, what="reading the run's events", parent=self)
        self._reader.answered.connect(self._on_events)
        self.search.textChanged.connect(lambda _t: self.reload())
        self.level.currentTextChanged.connect(lambda _t: self.reload())
        timeline.runChanged.connect(self.reload)
        timeline.statusChanged.connect(self.reload)
        self.reload()

    @property
    def loading(self) -> bool:
        """The events for the query shown are being read (tests wait on it)."""
        return self._wanted is not None

    def reload(self) -> None:
        record = self.timeline.record
        level = self.level.currentText()
        query, level_only = prefix_query(self.search.text()), None if level == "all" else level
        if record is None:
            self._reader.cancel()
            self._wanted = None
            self._fill([])
            return
        self._wanted = (self.timeline.run_dir, self.timeline.status, query, level_only)
        self._reader.submit(self._wanted, lambda _task: read_events(record, query, level_only))

    def _on_events(self, wanted: Any, events: Any) -> None:
        if wanted == self._wanted:
            self._wanted = None
            self._fill(events if isinstance(events, list) else [])

    def _fill(self, events: list[Event]) -> None:
        self.events = events
        self.table.setRowCount(len(self.events))
        for row, event in enumerate(self.events):
            cells = (event_time(event.t), event.level, event.kind, event.message)
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(event.message if col == 3 else text)
                self.table.setItem(row, col, item)

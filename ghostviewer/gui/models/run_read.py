"""One thing read from the shown run (its batch's images, its call's inputs) on the GUI's Worker, once per run and
status: `cleared` when there is no run or another run is shown (the last run's answer never stands for this one),
`answered(result)` with the read's result — or the exception it raised, which the owner puts in its own words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui.link.worker import Worker
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RunRecord


class RunRead(QObject):
    cleared = Signal()
    answered = Signal(object)  # the read's result, or the Exception it raised (a bug of ours: the log has it)

    def __init__(self, timeline: TimelineModel, read: Callable[[RunRecord], Any], what: str,
                 synchronous: bool = False, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.timeline, self._read = timeline, read
        self.loading = False
        self.key: tuple[str, str] | None = None  # (run folder, status) the answer is read for
        self._worker = Worker(1, latest=True, synchronous=synchronous, what=what, parent=self)
        self._worker.answered.connect(self._on_answer)
        timeline.runChanged.connect(self.read)
        timeline.statusChanged.connect(self.read)

    def read(self) -> None:
        record = self.timeline.record
        if record is None:
            self._worker.cancel()
            self.key, self.loading = None, False
            self.cleared.emit()
            return
        key = (str(record.path), self.timeline.status)
        if key == self.key:
            return
        new_run = self.key is None or key[0] != self.key[0]
        self.key, self.loading = key, True
        if new_run:
            self.cleared.emit()
        self._worker.submit(key, lambda _task: self._read(record))

    def _on_answer(self, key: Any, result: Any) -> None:
        if key != self.key:
            return
        self.loading = False
        self.answered.emit(result)

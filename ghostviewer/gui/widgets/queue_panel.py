"""Run queue: queued / running / ended jobs with progress bars and cancel; bound to QueueModel. A row says what
the job is ("replay 2/5 · seed 7 · fp16 · ghost: nan-latents · 1 bypass · prompt"), a queued job held back
says "waiting" (for the bisection, the sweep), an ended job shows its verdict (coloured as the verdict badge
colours it) or how it ended; the tooltip has it all in full (every bypassed and captured module, why it ended)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QProgressBar,
    QPushButton,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.models.queue_model import QueueModel
from ghostviewer.gui.widgets.verdict_badge import COLOURS

STATE_WIDTH = 84  # "engine died", "color_cast"


class QueuePanel(QWidget):
    cancelRequested = Signal(int)  # job id
    jobActivated = Signal(int)

    def __init__(self, model: QueueModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.tree = QTreeWidget(rootIsDecorated=False, uniformRowHeights=True)
        self.tree.setHeaderLabels(["Run", "Status", "Progress", ""])
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column, width in ((1, STATE_WIDTH), (2, 64), (3, 26)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)
            self.tree.setColumnWidth(column, width)
        self.cancel_button = QPushButton("Cancel running")
        self.clear_button = QPushButton("Clear finished")
        buttons = QHBoxLayout()
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.tree)
        layout.addLayout(buttons)
        self._items: dict[int, QTreeWidgetItem] = {}
        self._bars: dict[int, QProgressBar] = {}
        self._cancels: dict[int, QToolButton] = {}
        model.jobAdded.connect(self._on_added)
        model.jobChanged.connect(self._on_changed)
        model.jobRemoved.connect(self._on_removed)
        self.cancel_button.clicked.connect(self._cancel_running)
        self.clear_button.clicked.connect(model.clear_finished)
        self.tree.itemActivated.connect(
            lambda item, _col: self.jobActivated.emit(item.data(0, Qt.ItemDataRole.UserRole)))

    def _on_added(self, job_id: int) -> None:
        item = QTreeWidgetItem(self.tree)
        item.setData(0, Qt.ItemDataRole.UserRole, job_id)
        bar = QProgressBar(minimum=0, textVisible=True)
        bar.setMaximumHeight(16)
        cancel = QToolButton(text="✕", toolTip="Cancel this run", autoRaise=True)
        cancel.clicked.connect(lambda: self.cancelRequested.emit(job_id))
        self.tree.setItemWidget(item, 2, bar)
        self.tree.setItemWidget(item, 3, cancel)
        self._items[job_id], self._bars[job_id], self._cancels[job_id] = item, bar, cancel
        self._on_changed(job_id)

    def _on_changed(self, job_id: int) -> None:
        job, item = self.model.job(job_id), self._items.get(job_id)
        if job is None or item is None:
            return
        item.setText(0, job.title)
        text, kind = job.state()
        tip = job.state_tip()
        item.setText(1, text)
        item.setForeground(1, QBrush(QColor(COLOURS.get(kind, COLOURS["none"])[0])))
        item.setToolTip(0, tip)
        item.setToolTip(1, tip)
        bar = self._bars[job_id]
        bar.setToolTip(tip)
        bar.setMaximum(max(job.steps, 1))
        bar.setValue(min(job.step, bar.maximum()) if job.status != "done" else bar.maximum())
        bar.setFormat(f"{job.step}/{job.steps}")
        self._cancels[job_id].setEnabled(not job.finished)

    def _on_removed(self, job_id: int) -> None:
        item = self._items.pop(job_id, None)
        self._bars.pop(job_id, None)
        self._cancels.pop(job_id, None)
        if item is not None:
            self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(item))

    def _cancel_running(self) -> None:
        job = self.model.running()
        if job is not None:
            self.cancelRequested.emit(job.id)


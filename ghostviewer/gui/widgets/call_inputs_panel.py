"""The shown run's call inputs beside its step images: the call's kind and key values ("img2img · strength 0.75 ·
batch 4") over thumbnails of its input images (init image, mask, control image, IP-adapter images), each named.
Hidden for a plain text-to-image run, so it costs no room. Bound to TimelineModel; the images are read on a Worker
(gui/link/worker.py), once per run and status."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from ghostviewer.gui.data.call_inputs import NO_INPUTS, CallInputs, read_call_inputs
from ghostviewer.gui.link.worker import Worker
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.thumbnail import Thumbnail

THUMB_PX = 60  # two of them, with the kind and values above, fit the images' height at 1366×768
COLUMN_PX = THUMB_PX + 8
MARGIN_PX = 4


class InputTile(QWidget):
    """One input image: its thumbnail over its name (and size, or why it is not shown)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(1)
        self.thumb = Thumbnail(THUMB_PX)
        self.name = QLabel()
        self.name.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.name.setFixedWidth(COLUMN_PX)
        self.name.setStyleSheet("font-size: 8pt")
        column.addWidget(self.thumb, 0, Qt.AlignmentFlag.AlignHCenter)
        column.addWidget(self.name)


class CallInputsPanel(QScrollArea):
    def __init__(self, model: TimelineModel, synchronous: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.inputs: CallInputs = NO_INPUTS
        self.loading = False
        self._for: tuple[str, str] | None = None
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Ignored)
        inner = QWidget()
        column = QVBoxLayout(inner)
        column.setContentsMargins(MARGIN_PX, 2, MARGIN_PX, 2)
        column.setSpacing(3)
        self.kind = QLabel()
        self.kind.setWordWrap(True)
        self.kind.setStyleSheet("font-weight: bold")
        self.values = QLabel()
        self.values.setWordWrap(True)
        self.values.setStyleSheet("color: #888; font-size: 8pt")
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #e0a000; font-size: 8pt")
        self.grid = QGridLayout()
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(3)
        for label in (self.kind, self.values, self.problem):
            column.addWidget(label)
        column.addLayout(self.grid)
        column.addStretch(1)
        self.setWidget(inner)
        self.tiles: list[InputTile] = []
        self._reader = Worker(1, latest=True, synchronous=synchronous, what="reading the call's input images",
                              parent=self)
        self._reader.answered.connect(self._on_inputs)
        model.runChanged.connect(self._read)
        model.statusChanged.connect(self._read)
        self._show(NO_INPUTS)
        self._read()

    def _read(self) -> None:
        record = self.model.record
        if record is None:
            self._reader.cancel()
            self._for, self.loading = None, False
            self._show(NO_INPUTS)
            return
        key = (str(record.path), self.model.status)
        if key == self._for:
            return
        if self._for is None or key[0] != self._for[0]:
            self._show(NO_INPUTS)  # the last run's inputs never stand beside this one
        self._for, self.loading = key, True
        self._reader.submit(key, lambda _task: read_call_inputs(record))

    def _on_inputs(self, key: Any, inputs: Any) -> None:
        if key != self._for:
            return
        self.loading = False
        if isinstance(inputs, Exception):  # a bug of ours (the log has it)
            inputs = CallInputs(problem=f"the call's inputs cannot be read: {inputs}")
        self._show(inputs)

    def _show(self, inputs: CallInputs) -> None:
        self.inputs = inputs
        self.kind.setText(inputs.kind)
        self.values.setText("\n".join(f"{name} {value}" for name, value in inputs.values))
        self.values.setVisible(bool(inputs.values))
        self.problem.setText(inputs.problem)
        self.problem.setVisible(bool(inputs.problem))
        while len(self.tiles) > len(inputs.images):
            self.tiles.pop().deleteLater()
        columns = 1 if len(inputs.images) <= 2 else 2
        for index, image in enumerate(inputs.images):
            if index == len(self.tiles):
                self.tiles.append(InputTile())
            tile = self.tiles[index]
            self.grid.addWidget(tile, *divmod(index, columns))
            tile.thumb.set_image(image.image, image.note or "not shown")
            tile.name.setText(image.name)  # one line; its size, or why it is not shown, in the tooltip
            tile.setToolTip(image.words)
        bar = self.verticalScrollBar().sizeHint().width()  # room kept for it: many IP-adapter images scroll
        self.setFixedWidth(columns * COLUMN_PX + (columns - 1) * self.grid.spacing() + 2 * MARGIN_PX + bar)
        self.setToolTip(inputs.summary)
        self.setVisible(inputs.shown)

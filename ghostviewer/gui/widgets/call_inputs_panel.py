"""The shown run's call inputs beside its step images: the call's kind and key values ("img2img · strength 0.75 ·
batch 4") over thumbnails of its input images (init image, mask, control image, IP-adapter images), each named.
Hidden for a plain text-to-image run, so it costs no room. Bound to TimelineModel; the images are read on a Worker
(gui/link/worker.py), once per run and status."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from ghostviewer.gui.data.call_inputs import NO_INPUTS, CallInputs, read_call_inputs
from ghostviewer.gui.models.run_read import RunRead
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
        self._reader = RunRead(model, read_call_inputs, "reading the call's input images", synchronous, parent=self)
        self._reader.cleared.connect(self._on_cleared)
        self._reader.answered.connect(self._on_inputs)
        self._show(NO_INPUTS)
        self._reader.read()

    @property
    def loading(self) -> bool:
        return self._reader.loading

    @property
    def _for(self) -> tuple[str, str] | None:  # the (run folder, status) read for; tests wait on it
        return self._reader.key

    def _on_cleared(self) -> None:
        self._show(NO_INPUTS)

    def _on_inputs(self, inputs: Any) -> None:
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

"""Feature maps of the module in focus at the timeline's step: a grid of channels (shared or per-channel
normalisation, a colour map), a histogram of the values, per-channel statistics in the tooltip. Bound to
StepDataModel (the step's tensors) and BlockModel; draws nothing while hidden; says so plainly when the module
was not captured, and in a batch (BatchModel) whose image's maps these are: the record keeps one image's."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from ghostviewer.analysis.stat_grid import array_summary, fmt
from ghostviewer.gui import messages
from ghostviewer.gui.data.feature_maps import (
    FM_PREFIX,
    ChannelGrid,
    captured_modules,
    channel_grid,
    channel_stats,
    histogram,
)
from ghostviewer.gui.data.step_data import StepData
from ghostviewer.gui.models.batch_model import BatchModel
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.step_data_model import ShownStep, StepDataModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.image_pane import image_canvas

COLORMAPS = ("viridis", "inferno", "CET-D1", "CET-L1")
NORMS = ("shared", "per channel")


class FeatureMapView(QWidget):
    def __init__(self, timeline: TimelineModel, blocks: BlockModel, data: StepDataModel,
                 batch: BatchModel | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.timeline, self.blocks, self.data, self.batch = timeline, blocks, data, batch
        self.sample_note = sample_note_label()
        self.title = QLabel()
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.norm = QComboBox(toolTip="One colour scale for all channels, or one per channel")
        self.norm.addItems(list(NORMS))
        self.cmap = QComboBox(toolTip="Colour map")
        self.cmap.addItems(list(COLORMAPS))
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: #e0a000; padding: 6px")
        bar = QHBoxLayout()
        bar.addWidget(QLabel("normalise"))
        bar.addWidget(self.norm)
        bar.addWidget(self.cmap)
        bar.addStretch(1)
        self.canvas, self.view, self.image = image_canvas()
        self.hist = self.canvas.addPlot(row=1, col=0)
        self.hist.setMaximumHeight(90)
        self.hist.setMouseEnabled(x=False, y=False)
        self.hist.hideButtons()
        self.hist.getAxis("left").setStyle(showValues=False)
        self.bars = self.hist.plot(stepMode="center", fillLevel=0, brush=(120, 170, 255, 150), pen="#78aaff")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.title)
        layout.addWidget(self.sample_note)
        layout.addLayout(bar)
        layout.addWidget(self.message)
        layout.addWidget(self.canvas, 1)
        self.module = ""
        self.fm: np.ndarray | None = None
        self.grid: ChannelGrid | None = None
        self._stats: dict[str, np.ndarray] = {}
        self.shown_step = ShownStep(self, data, self.reload)  # drawn while on screen, else once back on it
        self.norm.currentTextChanged.connect(lambda _t: self.shown_step.changed())
        self.cmap.currentTextChanged.connect(lambda _t: self.shown_step.changed())
        self.canvas.scene().sigMouseMoved.connect(self._on_hover)
        blocks.moduleSelected.connect(lambda _m: self.shown_step.changed())
        follow_batch_note(self.sample_note, batch, "feature maps")

    @property
    def captured(self) -> bool:
        return self.fm is not None

    @property
    def step_data(self) -> StepData:
        """The step shown (or to show once on screen)."""
        return self.shown_step.data

    def reload(self) -> None:
        """Draw the module in focus from the step's tensors (already read by the step-data model)."""
        data = self.step_data
        tensors = data.tensors
        available = captured_modules(tensors)
        module = self.blocks.selected or (available[0] if available else "")
        self.module = module
        self.fm = tensors.get(FM_PREFIX + module) if module else None
        step = "" if data.empty else f" @ step {data.step}"
        self.title.setText(f"<b>{module or 'no block selected'}</b>{step}")
        if self.timeline.record is None:
            self._show_message("No run shown.")
        elif not module:
            self._show_message("Select a block in the tree or a cell of the heat map.")
        elif self.fm is None:
            self._show_message(messages.FM_NOT_CAPTURED.format(module=module))
        else:
            self.message.hide()
            self._stats = channel_stats(self.fm)
        self._draw()

    def _show_message(self, text: str) -> None:
        self.message.setText(text)
        self.message.show()

    def _draw(self) -> None:
        if self.fm is None:
            self.grid = None
            self.image.clear()
            self.bars.setData([0, 1], [0])
            return
        lut = pg.colormap.get(self.cmap.currentText()).getLookupTable(nPts=256, alpha=False)
        self.grid = channel_grid(self.fm, lut, self.norm.currentText() == "per channel")
        self.image.setImage(self.grid.image, autoLevels=False, levels=(0, 255))
        self.view.autoRange(padding=0.01)
        edges, counts = histogram(self.fm)
        if counts.size:
            self.bars.setData(edges, counts)
        else:
            self.bars.setData([0, 1], [0])
        self.canvas.setToolTip(array_summary(self.fm))

    def channel_tooltip(self, channel: int) -> str:
        s = self._stats
        return (f"channel {channel}: min {fmt(s['min'][channel])} · max {fmt(s['max'][channel])} · "
                f"mean {fmt(s['mean'][channel])} · std {fmt(s['std'][channel])}"
                + (f" · NaN {int(s['nan'][channel])}" if s["nan"][channel] else "")
                + (f" · Inf {int(s['inf'][channel])}" if s["inf"][channel] else ""))

    def _on_hover(self, scene_pos: QPointF) -> None:
        if self.grid is None or self.fm is None:
            return
        point = self.image.mapFromScene(scene_pos)
        channel = self.grid.channel_at(point.x(), point.y())
        summary = array_summary(self.fm)
        self.canvas.setToolTip(summary if channel is None else f"{self.channel_tooltip(channel)}\n{summary}")


def sample_note_label() -> QLabel:
    """The line above a batch's maps saying whose they are (hidden for a run of one image)."""
    label = QLabel(wordWrap=True)
    label.setStyleSheet("color: #e0a000; padding: 0 6px")
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # wraps, never widens the dock
    label.hide()
    return label


def _show_sample_note(label: QLabel, batch: BatchModel | None, what: str) -> None:
    text = batch.maps_note(what) if batch is not None else ""
    label.setText(text)
    label.setToolTip(text)
    label.setVisible(bool(text))


def follow_batch_note(label: QLabel, batch: BatchModel | None, what: str) -> None:
    """Keeps `label` saying whose `what` (feature maps, attention maps) are as the batch or its selection changes."""
    if batch is not None:
        batch.sampleSelected.connect(lambda _i: _show_sample_note(label, batch, what))
        batch.batchChanged.connect(lambda: _show_sample_note(label, batch, what))
    _show_sample_note(label, batch, what)

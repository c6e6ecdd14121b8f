"""Cross-attention maps, one per prompt token (labels and ids), for one layer or the mean of all, at the
timeline's step or over the whole run; a line of self-attention entropies. Bound to StepDataModel (the step's
maps, the run's mean accumulated there), TimelineModel (the prompt's tokens) and BlockModel (a focused attention
block picks its layer); draws nothing while hidden. In a batch (BatchModel) a line says whose maps these are: the
record keeps one image's."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from ghostviewer.analysis.stat_grid import array_summary
from ghostviewer.gui.data.attention_data import (
    MAX_TOKENS,
    aggregate,
    attention_layers,
    entropy_summary,
    layer_maps,
    prompt_tokens,
    tile_label,
)
from ghostviewer.gui.data.feature_maps import ChannelGrid, channel_grid
from ghostviewer.gui.data.step_data import StepData
from ghostviewer.gui.models.batch_model import BatchModel
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.step_data_model import ShownStep, StepDataModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.feature_map_view import follow_batch_note, sample_note_label
from ghostviewer.gui.widgets.image_pane import image_canvas

ALL_LAYERS = "all layers (mean)"
LABEL_GAP = 3  # image pixels between token tiles, room for the labels
NO_MAPS = "No attention maps in this run: tick “Capture attention” in the block tree and re-run."


class AttentionView(QWidget):
    def __init__(self, timeline: TimelineModel, blocks: BlockModel, data: StepDataModel,
                 batch: BatchModel | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.timeline, self.blocks, self.data, self.batch = timeline, blocks, data, batch
        self.sample_note = sample_note_label()
        self.layer = QComboBox(toolTip="One cross-attention layer, or the mean of all")
        self.layer.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.layer.setMinimumContentsLength(16)
        self.whole_run = QCheckBox("over the run", toolTip="Mean over every recorded step instead of this step")
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: #e0a000; padding: 6px")
        self.entropy = QLabel(wordWrap=True)
        self.entropy.setStyleSheet("color: #aaa")
        self.entropy.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        bar = QHBoxLayout()
        bar.addWidget(self.layer, 1)
        bar.addWidget(self.whole_run)
        self.canvas, self.view, self.image = image_canvas()
        self.grid: ChannelGrid | None = None
        self._labels: list[pg.TextItem] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.sample_note)
        layout.addWidget(self.message)
        layout.addWidget(self.canvas, 1)
        layout.addWidget(self.entropy)
        self.lut = pg.colormap.get("inferno").getLookupTable(nPts=256, alpha=False)
        self.maps: np.ndarray | None = None  # (tokens, h, w) shown
        self.tokens: list[tuple[str, int]] = []
        self._tokens_of: tuple[str | None, str] | None = None  # (run, status) the tokens were read for
        self.shown_step = ShownStep(self, data, self.reload)  # drawn while on screen, else once back on it
        changed = self.shown_step.changed
        self.canvas.scene().sigMouseMoved.connect(self._on_hover)
        self.layer.currentTextChanged.connect(lambda _t: changed())
        self.whole_run.toggled.connect(lambda _on: changed())
        blocks.moduleSelected.connect(self._on_module)
        data.runAttentionChanged.connect(lambda: changed() if self.whole_run.isChecked() else None)
        follow_batch_note(self.sample_note, batch, "attention maps")

    @property
    def step_data(self) -> StepData:
        """The step shown (or to show once on screen)."""
        return self.shown_step.data

    def _read_tokens(self) -> None:
        """The prompt's tokens, once per run (and again when its status changes: a live run writes its
        prompt event after it opened)."""
        record = self.timeline.record
        which = (self.timeline.run_dir, self.timeline.status)
        if which != self._tokens_of:
            self._tokens_of = which
            self.tokens = prompt_tokens(record) if record is not None else []

    def _on_module(self, module: str) -> None:
        for i in range(self.layer.count()):
            if module and self.layer.itemText(i).startswith(module + "."):
                self.layer.setCurrentIndex(i)
                return

    def _fill_layers(self, layers: list[str]) -> None:
        wanted = [ALL_LAYERS, *layers]
        if [self.layer.itemText(i) for i in range(self.layer.count())] == wanted:
            return
        current = self.layer.currentText()
        self.layer.blockSignals(True)
        self.layer.clear()
        self.layer.addItems(wanted)
        self.layer.setCurrentIndex(max(0, self.layer.findText(current)))
        self.layer.blockSignals(False)

    def reload(self) -> None:
        """Draw this step's maps (or the run's mean) from what the step-data model has read."""
        self._read_tokens()
        tensors = self.step_data.tensors
        if tensors:
            self._fill_layers(attention_layers(tensors))
        layer = None if self.layer.currentText() in ("", ALL_LAYERS) else self.layer.currentText()
        count = min(len(self.tokens) or MAX_TOKENS, MAX_TOKENS)
        if self.whole_run.isChecked():
            self.maps = self.data.run_attention(layer, count)
        else:
            self.maps = aggregate(layer_maps(tensors, layer), count)
        self.entropy.setText(entropy_summary(tensors))
        self.message.setVisible(self.maps is None)
        self.message.setText(NO_MAPS if self.timeline.record is not None else "No run shown.")
        self._draw()

    def _draw(self) -> None:
        for label in self._labels:
            self.view.removeItem(label)
        self._labels = []
        if self.maps is None:
            self.grid = None
            self.image.clear()
            return
        grid = self.grid = channel_grid(self.maps, self.lut, per_channel=False, gap=LABEL_GAP)
        self.image.setImage(grid.image, autoLevels=False, levels=(0, 255))
        for t in range(grid.count):
            row, col = divmod(t, grid.cols)
            text = pg.TextItem(tile_label(self.tokens[t][0]) if t < len(self.tokens) else str(t), color="#ddd",
                               anchor=(0.5, 1))
            text.setPos(col * (grid.width + grid.gap) + grid.width / 2, row * (grid.height + grid.gap))
            self.view.addItem(text)
            self._labels.append(text)
        self.view.setRange(QRectF(0, -grid.gap, grid.image.shape[1], grid.image.shape[0] + grid.gap), padding=0.02)

    def _on_hover(self, scene_pos: QPointF) -> None:
        if self.grid is None or self.maps is None:
            return
        point = self.image.mapFromScene(scene_pos)
        t = self.grid.channel_at(point.x(), point.y())
        if t is None:
            self.canvas.setToolTip("")
            return
        label, ident = self.tokens[t] if t < len(self.tokens) else ("?", -1)
        self.canvas.setToolTip(f"token {t}: {label} (id {ident})\n{array_summary(self.maps[t])}")

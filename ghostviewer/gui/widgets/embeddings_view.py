"""The prompt's token embeddings in 2-D: a scatter (pyqtgraph) with each point labelled by its token, the input
embeddings or the text encoder's final hidden states, projected by PCA (UMAP / t-SNE when installed); the
method actually used is shown. Bound to TimelineModel (follows the shown run); reads and projects nothing while
hidden (a dock behind another tab), and catches up when shown."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from ghostviewer.analysis.projection import available_methods, project_2d
from ghostviewer.gui.attention_data import prompt_tokens, tile_label
from ghostviewer.gui.models.step_data_model import is_shown, watch_visibility
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.image_pane import BACKGROUND
from ghostviewer.record import RecordError

SOURCES = {"input embeddings": "input_embeddings", "final hidden states": "last_hidden_state"}
NO_PROMPT = "No prompt embeddings in this run (the pipeline has no tokenizer or text encoder)."


class EmbeddingsView(QWidget):
    def __init__(self, timeline: TimelineModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.timeline = timeline
        self.source = QComboBox(toolTip="Token embeddings fed to the text encoder, or its last hidden states")
        self.source.addItems(list(SOURCES))
        self.method = QComboBox(toolTip="2-D projection (UMAP and t-SNE when installed)")
        self.method.addItems(list(available_methods()))
        self.used = QLabel()
        self.used.setStyleSheet("color: #aaa")
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: #e0a000; padding: 6px")
        bar = QHBoxLayout()
        bar.addWidget(self.source, 1)
        bar.addWidget(self.method)
        bar.addWidget(self.used)
        self.plot = pg.PlotWidget(background=BACKGROUND)
        self.plot.setMenuEnabled(False)
        self.plot.hideAxis("left")
        self.plot.hideAxis("bottom")
        self.scatter = pg.ScatterPlotItem(size=9, pen=None, brush=pg.mkBrush(90, 170, 255, 220), hoverable=True)
        self.plot.addItem(self.scatter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.message)
        layout.addWidget(self.plot, 1)
        self.points: np.ndarray | None = None  # (tokens, 2) shown
        self.labels: list[pg.TextItem] = []
        self._tensors: dict[str, np.ndarray] = {}
        self._tokens: list[tuple[str, int]] = []
        self._read_for: tuple[str | None, str] | None = None  # (run, status) the prompt was read for
        self._stale = True
        self.source.currentTextChanged.connect(lambda _t: self._changed())
        self.method.currentTextChanged.connect(lambda _t: self._changed())
        timeline.runChanged.connect(self._changed)
        timeline.statusChanged.connect(self._changed)  # a live run writes its prompt after it opened
        watch_visibility(self, lambda: self._changed() if self._stale else None)
        self._changed()

    def _changed(self) -> None:
        if not is_shown(self):
            self._stale = True
            return
        self._stale = False
        if (self.timeline.run_dir, self.timeline.status) != self._read_for:
            self._on_run()
        else:
            self.redraw()

    def _on_run(self) -> None:
        record = self.timeline.record
        self._read_for = (self.timeline.run_dir, self.timeline.status)
        try:
            self._tensors = {} if record is None else record.tensors("prompt")
        except (KeyError, RecordError):
            self._tensors = {}
        self._tokens = prompt_tokens(record) if record is not None and self._tensors else []
        self.redraw()

    def redraw(self) -> None:
        for label in self.labels:
            self.plot.removeItem(label)
        self.labels = []
        vectors = self._tensors.get(SOURCES[self.source.currentText()])
        if vectors is None or vectors.ndim != 2 or not len(vectors):
            self.points = None
            self.scatter.clear()
            self.used.setText("")
            self.message.setText(NO_PROMPT if self.timeline.record is not None else "No run shown.")
            self.message.setVisible(True)
            return
        self.message.setVisible(False)
        points, used = project_2d(vectors, self.method.currentText())
        self.points = points
        self.used.setText(used.upper())
        finite = np.isfinite(points).all(axis=1)
        self.scatter.setData(pos=points[finite], data=np.flatnonzero(finite),
                             tip=lambda x, y, data: self._tip(int(data)))
        for i, (x, y) in enumerate(points):
            if not finite[i]:
                continue
            text = pg.TextItem(self._label(i), color="#ddd", anchor=(0.5, 1.2))
            text.setPos(float(x), float(y))
            self.plot.addItem(text)
            self.labels.append(text)
        self.plot.autoRange(padding=0.15)

    def _label(self, i: int) -> str:
        return tile_label(self._tokens[i][0]) if i < len(self._tokens) else str(i)

    def _tip(self, i: int) -> str:
        label, ident = self._tokens[i] if i < len(self._tokens) else ("?", -1)
        return f"token {i}: {label} (id {ident})"

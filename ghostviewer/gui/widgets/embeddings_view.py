"""The prompt's token embeddings in 2-D: a scatter (pyqtgraph) with each point labelled by its token, the input
embeddings or the text encoder's final hidden states, projected by PCA (UMAP / t-SNE when installed); the
method actually used is shown. Bound to TimelineModel (follows the shown run); the prompt's tensors are read and
projected off the GUI thread (a Worker: UMAP and t-SNE take seconds), nothing while hidden (a dock behind another
tab), and it catches up when shown.

Labels never overlap: each goes above, below, right or left of its point, wherever it covers no other label and
no point, and is hidden where no place is free (words before ⟨start⟩/⟨end⟩); they are placed again when the view
is zoomed, panned or resized. Hovering a point lists every token under the cursor, hidden labels included."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from ghostviewer.analysis.projection import available_methods, project_2d
from ghostviewer.gui.data.attention_data import prompt_tokens, tile_label
from ghostviewer.gui.dialogs.error_reporter import one_line
from ghostviewer.gui.link.worker import Worker
from ghostviewer.gui.models.step_data_model import DrawWhenShown
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.image_pane import BACKGROUND
from ghostviewer.record import RecordError, RunRecord

SOURCES = {"input embeddings": "input_embeddings", "final hidden states": "last_hidden_state"}
NO_PROMPT = "No prompt embeddings in this run (the pipeline has no tokenizer or text encoder)."
NOT_PROJECTED = "Could not project the embeddings by {method}: {message}"
MARKER_PX = 9
LABEL_GAP_PX = 2


def place_labels(points: np.ndarray, sizes: np.ndarray, view: Sequence[float], marker: float = MARKER_PX,
                 gap: float = LABEL_GAP_PX) -> list[tuple[float, float] | None]:
    """Where each label goes, in the order given (the first ones win): the top-left corner of its (w, h) box in
    pixels (y down), at the first place beside its point — above, below, right, left — that overlaps no point's
    marker and no label placed before it, inside `view` (x0, y0, x1, y1); None where no place is free."""
    points, sizes = np.asarray(points, float).reshape(-1, 2), np.asarray(sizes, float).reshape(-1, 2)
    half = marker / 2
    taken = [np.column_stack([points - half, points + half])]  # (x0, y0, x1, y1) of every marker
    placed: list[tuple[float, float] | None] = []
    x0, y0, x1, y1 = view
    for (px, py), (w, h) in zip(points, sizes):
        corners = ((px - w / 2, py - half - gap - h), (px - w / 2, py + half + gap),
                   (px + half + gap, py - h / 2), (px - half - gap - w, py - h / 2))
        boxes = np.concatenate(taken)
        spot = None
        for left, top in corners:
            if left < x0 or top < y0 or left + w > x1 or top + h > y1:
                continue
            if not ((boxes[:, 0] < left + w) & (boxes[:, 2] > left) & (boxes[:, 1] < top + h)
                    & (boxes[:, 3] > top)).any():
                spot = (left, top)
                break
        placed.append(spot)
        if spot is not None:
            taken.append(np.array([[spot[0], spot[1], spot[0] + w, spot[1] + h]]))
    return placed


def read_prompt(record: RunRecord) -> tuple[dict[str, np.ndarray], list[tuple[str, int]]]:
    """The run's prompt tensors and its tokens (label, id); ({}, []) when it recorded none (a worker calls this)."""
    try:
        tensors = record.tensors("prompt")
    except (KeyError, RecordError):
        return {}, []
    return tensors, prompt_tokens(record) if tensors else []


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
        self.scatter = pg.ScatterPlotItem(size=MARKER_PX, pen=None, brush=pg.mkBrush(90, 170, 255, 220),
                                          hoverable=True)
        self.plot.addItem(self.scatter)
        self.scatter.sigHovered.connect(self._on_hover)
        view = self.plot.getViewBox()
        view.sigRangeChanged.connect(lambda *_args: self.place_labels())
        view.sigResized.connect(lambda *_args: self.place_labels())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.message)
        layout.addWidget(self.plot, 1)
        self.points: np.ndarray | None = None  # (tokens, 2) shown
        self.labels: list[pg.TextItem] = []  # one per finite point, in token order; some hidden (overlaps)
        self._labelled: list[int] = []  # the token of each label
        self._tensors: dict[str, np.ndarray] = {}
        self._tokens: list[tuple[str, int]] = []
        self._read_for: tuple[str | None, str] | None = None  # (run, status) the prompt was read for
        self._reading_prompt = False
        self._projecting: tuple[Any, ...] | None = None  # (run and status, source, method) being projected
        self._worker = Worker(1, latest=True, what="projecting the prompt embeddings", parent=self)
        self._worker.answered.connect(self._on_answer)
        self.drawing = DrawWhenShown(self, self._draw)  # drawn while on screen, else once back on it
        changed = self.drawing.changed
        self.source.currentTextChanged.connect(lambda _t: changed())
        self.method.currentTextChanged.connect(lambda _t: changed())
        timeline.runChanged.connect(changed)
        timeline.statusChanged.connect(changed)  # a live run writes its prompt after it opened
        changed()

    @property
    def loading(self) -> bool:
        """The prompt is being read or projected (tests wait on it)."""
        return self._reading_prompt or self._projecting is not None

    def _draw(self) -> None:
        if (self.timeline.run_dir, self.timeline.status) != self._read_for:
            self._on_run()
        elif not self._reading_prompt:  # else its answer draws, with the source and method chosen then
            self.redraw()

    def _on_run(self) -> None:
        record = self.timeline.record
        self._read_for = (self.timeline.run_dir, self.timeline.status)
        if record is None:
            self._reading_prompt, self._tensors, self._tokens = False, {}, []
            self.redraw()
            return
        self._reading_prompt = True
        self._worker.submit(("prompt", self._read_for), lambda _task: read_prompt(record))

    def redraw(self) -> None:
        """Project the shown source by the chosen method (off the GUI thread); _show draws the points."""
        vectors = self._tensors.get(SOURCES[self.source.currentText()])
        if vectors is None or vectors.ndim != 2 or not len(vectors):
            self._worker.cancel()
            self._projecting = None
            self._show(None, "", NO_PROMPT if self.timeline.record is not None else "No run shown.")
            return
        method = self.method.currentText()
        self._projecting = (self._read_for, self.source.currentText(), method)
        self.used.setText(f"{method.upper()}…")
        self._worker.submit(("points", self._projecting), lambda _task: project_2d(vectors, method))

    def _on_answer(self, tag: tuple[str, Any], result: Any) -> None:
        kind, key = tag
        if kind == "prompt" and key == self._read_for:
            self._reading_prompt = False
            self._tensors, self._tokens = result if isinstance(result, tuple) else ({}, [])
            self.redraw()
        elif kind == "points" and key == self._projecting:
            self._projecting = None
            if isinstance(result, Exception):
                self._show(None, "", NOT_PROJECTED.format(method=key[2], message=one_line(result)))
            else:
                self._show(*result)

    def _show(self, points: np.ndarray | None, used: str, message: str = "") -> None:
        for label in self.labels:
            self.plot.removeItem(label)
        self.labels, self._labelled = [], []
        self.message.setText(message)
        self.message.setVisible(bool(message))
        self.used.setText(used.upper())
        self.points = points
        if points is None:
            self.scatter.clear()
            return
        finite = np.isfinite(points).all(axis=1)
        self.scatter.setData(pos=points[finite], data=np.flatnonzero(finite), tip=None)  # _on_hover: all of them
        for i, (x, y) in enumerate(points):
            if not finite[i]:
                continue
            text = pg.TextItem(self._label(i), color="#ddd", anchor=(0.5, 1.2))
            text.setPos(float(x), float(y))
            self.plot.addItem(text)
            self.labels.append(text)
            self._labelled.append(i)
        self.plot.autoRange(padding=0.15)
        self.place_labels()

    def place_labels(self) -> None:
        """Show each label where it overlaps no other label and no point (place_labels), or hide it."""
        if self.points is None or not self.labels:
            return
        view = self.plot.getViewBox()
        area = view.sceneBoundingRect()
        at = [view.mapViewToScene(QPointF(*map(float, self.points[i]))) for i in self._labelled]
        sizes, margins = [], []
        for label in self.labels:
            box, margin = label.textItem.boundingRect(), label.textItem.document().documentMargin()
            sizes.append((box.width() - 2 * margin, box.height() - 2 * margin))
            margins.append(margin)
        order = sorted(range(len(self.labels)), key=lambda k: self.labels[k].toPlainText().startswith("⟨"))
        spots = place_labels(np.array([(at[k].x(), at[k].y()) for k in order]), np.array([sizes[k] for k in order]),
                             (area.left(), area.top(), area.right(), area.bottom()))
        for k, spot in zip(order, spots):
            label = self.labels[k]
            label.setVisible(spot is not None)
            if spot is not None:  # the anchor that puts the text's box (margins included) there
                (w, h), m = sizes[k], margins[k]
                label.setAnchor(((at[k].x() - spot[0] + m) / (w + 2 * m), (at[k].y() - spot[1] + m) / (h + 2 * m)))

    @property
    def shown_labels(self) -> list[pg.TextItem]:
        return [label for label in self.labels if label.isVisible()]

    def _on_hover(self, _item: object, points: Sequence, _event: object) -> None:
        tokens = sorted(int(point.data()) for point in points)
        self.plot.getViewBox().setToolTip("\n".join(self._tip(i) for i in tokens))

    def _label(self, i: int) -> str:
        return tile_label(self._tokens[i][0]) if i < len(self._tokens) else str(i)

    def _tip(self, i: int) -> str:
        label, ident = self._tokens[i] if i < len(self._tokens) else ("?", -1)
        return f"token {i}: {label} (id {ident})"

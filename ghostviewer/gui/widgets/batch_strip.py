"""A batch run's N images side by side under the step images, each with its own verdict badge ("image 3 of 4: NaN at
step 7 in unet.up_blocks.1", from the record's per-sample NaN/Inf table when it has one); clicking one selects it —
the sample the image views describe. Bound to BatchModel; hidden for a run of one image, so it costs no room. More
tiles than fit scroll sideways."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QMouseEvent, QResizeEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QScrollArea, QSizePolicy, QWidget

from ghostviewer.gui.data.batch_images import Sample
from ghostviewer.gui.models.batch_model import BatchModel
from ghostviewer.gui.models.timeline_model import Badge
from ghostviewer.gui.widgets.thumbnail import Thumbnail
from ghostviewer.gui.widgets.verdict_badge import VerdictBadge

THUMB_PX = 50
TILE_MIN_PX, TILE_MAX_PX = 156, 320
SELECTED = "#4fc3f7"
ZWSP = "\u200b"  # lets a long module path wrap at its dots
LONG_WORD = 18  # characters: a module path longer than this may wrap at its dots on a narrow tile


def badge_text(sample: Sample) -> str:
    """'image 3 of 4:' on its line, what became of it below (wrapped at spaces; a long module path at its dots)."""
    head, _, rest = sample.words.partition(": ")
    words = [w.replace(".", "." + ZWSP) if len(w) > LONG_WORD else w for w in rest.split(" ")]
    return f"{head}:\n{' '.join(words)}" if rest else head


class SampleTile(QFrame):
    clicked = Signal(int)

    def __init__(self, index: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.index = index
        self.setObjectName("sampleTile")
        self.setMinimumWidth(TILE_MIN_PX)
        self.setMaximumWidth(TILE_MAX_PX)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        row = QHBoxLayout(self)
        row.setContentsMargins(3, 3, 3, 3)
        row.setSpacing(4)
        self.thumb = Thumbnail(THUMB_PX)
        self.badge = VerdictBadge(wrap=True)
        self.badge.setFixedHeight(THUMB_PX)
        row.addWidget(self.thumb)
        row.addWidget(self.badge, 1)
        self.set_selected(False)

    def show_sample(self, sample: Sample, pending: bool) -> None:
        self.thumb.set_image(sample.image, "pending" if pending else "no image")
        words = sample.words if sample.verdict else f"image {sample.index + 1} of {sample.count}"
        text = badge_text(sample) if sample.verdict else words + (": pending" if pending else "")
        scores = [f"{k} {v:.3g}" for k, v in (sample.verdict.get("scores") or {}).items()
                  if isinstance(v, (int, float))]
        tooltip = "\n".join([sample.words, *([sample.spread] if sample.spread else []), *scores])
        self.badge.show_badge(Badge(text, sample.badge_kind if sample.verdict else "none", tooltip))
        self.setToolTip(tooltip + "\nclick: show this image")

    def set_selected(self, selected: bool) -> None:
        self.selected = selected
        colour = SELECTED if selected else "transparent"
        self.setStyleSheet(f"QFrame#sampleTile {{ border: 2px solid {colour}; border-radius: 4px; }}")

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt's name
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit(self.index)
        super().mousePressEvent(event)


class BatchStrip(QScrollArea):
    def __init__(self, model: BatchModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        inner = QWidget()
        self.row = QHBoxLayout(inner)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(2)
        self.row.addStretch(0)
        self.setWidget(inner)
        self.tiles: list[SampleTile] = []
        model.batchChanged.connect(self._show)
        model.sampleSelected.connect(self._select)
        self._show()

    def _show(self) -> None:
        batch = self.model.batch
        while len(self.tiles) > batch.count:
            self.tiles.pop().deleteLater()
        while len(self.tiles) < batch.count:
            tile = SampleTile(len(self.tiles))
            tile.clicked.connect(self.model.select)
            self.row.insertWidget(len(self.tiles), tile, 1)
            self.tiles.append(tile)
        pending = self.model.timeline.status == "running"
        for tile, sample in zip(self.tiles, batch.samples, strict=True):
            tile.show_sample(sample, pending)
        self._select(self.model.selected)
        self.setVisible(batch.count > 1)
        self._fit_height()

    def _select(self, index: int) -> None:
        for tile in self.tiles:
            tile.set_selected(tile.index == index)
        if 0 <= index < len(self.tiles):
            self.ensureWidgetVisible(self.tiles[index], 0, 0)

    def _fit_height(self) -> None:
        """One row of tiles, and the scroll bar's height only when the tiles do not all fit."""
        tile_h = THUMB_PX + 10
        overflow = len(self.tiles) * (TILE_MIN_PX + self.row.spacing()) > self.viewport().width() + 1
        bar = self.horizontalScrollBar().sizeHint().height() if overflow else 0
        self.setFixedHeight(tile_h + bar)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._fit_height()

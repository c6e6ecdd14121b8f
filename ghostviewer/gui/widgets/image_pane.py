"""One titled image view (pyqtgraph ImageItem in an aspect-locked ViewBox); RGB(A) uint8 images."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QWidget

pg.setConfigOptions(imageAxisOrder="row-major", antialias=False)
BACKGROUND = "#202124"


TITLE_PT = 9


class ImagePane(pg.GraphicsLayoutWidget):
    """The title is cut with '…' to the pane's width (never clipped mid-glyph); the whole of it is the tooltip."""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setBackground(BACKGROUND)
        self.default_title = title
        self.full_title = title
        font = QFont(self.font())
        font.setPointSize(TITLE_PT)
        self.title_metrics = QFontMetrics(font)
        self.title = self.addLabel(title, row=0, col=0, size=f"{TITLE_PT}pt")
        self.view = self.addViewBox(row=1, col=0, lockAspect=True, invertY=True, enableMouse=False,
                                    enableMenu=False)  # never built: ~6 ms a view, a window has dozens
        self.view.setDefaultPadding(0.02)
        self.item = pg.ImageItem()
        self.view.addItem(self.item)
        self.ci.layout.setContentsMargins(2, 2, 2, 2)

    @property
    def image(self) -> np.ndarray | None:
        return self.item.image

    def set_image(self, image: np.ndarray | None, title: str | None = None) -> None:
        if image is None:
            if self.item.image is not None:  # clearing an empty pane would repaint it for nothing
                self.item.clear()
        else:
            self.item.setImage(image, autoLevels=False, levels=(0, 255))
        self.full_title = title or self.default_title
        self._show_title()

    def title_room(self) -> int:
        return max(self.width() - 16, 10)

    def _show_title(self) -> None:
        shown = self.title_metrics.elidedText(self.full_title, Qt.TextElideMode.ElideRight, self.title_room())
        if shown != self.title.text:
            self.title.setText(shown)
        self.setToolTip(self.full_title if shown != self.full_title else "")

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if "title" in self.__dict__:  # pyqtgraph resizes before __init__ has made the title
            self._show_title()


def image_canvas() -> tuple[pg.GraphicsLayoutWidget, pg.ViewBox, pg.ImageItem]:
    """A dark canvas with one aspect-locked, top-down view holding an image (grids of maps use it)."""
    canvas = pg.GraphicsLayoutWidget()
    canvas.setBackground(BACKGROUND)
    view = canvas.addViewBox(row=0, col=0, lockAspect=True, invertY=True, enableMouse=False, enableMenu=False)
    image = pg.ImageItem()
    view.addItem(image)
    return canvas, view, image

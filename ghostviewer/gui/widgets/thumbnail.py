"""A small image drawn as a pixmap, scaled to fit a square box with nearest-neighbour sampling (a 64×64 input keeps
its pixels crisp), on the image panes' dark background; an image that is missing shows its reason instead."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from ghostviewer.gui.widgets.image_pane import BACKGROUND


def to_qimage(image: np.ndarray) -> QImage:
    """(H, W, 3) uint8 → a QImage owning its own copy of the pixels."""
    rgb = np.ascontiguousarray(image[..., :3], dtype=np.uint8)
    height, width = rgb.shape[:2]
    return QImage(rgb.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()


class Thumbnail(QLabel):
    def __init__(self, box_px: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.box_px = box_px
        self.image: np.ndarray | None = None
        self.setFixedSize(box_px, box_px)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setStyleSheet(f"QLabel {{ background: {BACKGROUND}; color: #bbbbbb; font-size: 8pt; }}")
        self.setWordWrap(True)

    def set_image(self, image: np.ndarray | None, missing: str = "—") -> None:
        self.image = image
        if image is None:
            self.clear()
            self.setText(missing)
            return
        pixmap = QPixmap.fromImage(to_qimage(image))
        self.setPixmap(pixmap.scaled(self.box_px, self.box_px, Qt.AspectRatioMode.KeepAspectRatio,
                                     Qt.TransformationMode.FastTransformation))

    def shown_pixel(self, x: float, y: float) -> tuple[int, int, int] | None:
        """The colour drawn at (x, y), in fractions of the image's width and height (what a user sees)."""
        pixmap = self.pixmap()
        if pixmap is None or pixmap.isNull():
            return None
        image = pixmap.toImage()
        colour = image.pixelColor(min(int(x * image.width()), image.width() - 1),
                                  min(int(y * image.height()), image.height() - 1))
        return colour.red(), colour.green(), colour.blue()

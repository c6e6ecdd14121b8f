"""A simple mask painter: a round brush over the init image (white: repaint, shown in red over the image), Undo of
the last stroke, Clear; Save writes the mask at the init image's own size as a PNG in the window's inputs folder
(beside its settings, app_settings.inputs_dir — never in the runs folder: a run keeps its own copy of its mask)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QImage, QMouseEvent, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.app_settings import inputs_dir

VIEW_PX = 384  # the image is drawn this large (a 64×64 init image: six screen pixels each)
OVERLAY = QColor(255, 40, 40)  # where the mask repaints
OVERLAY_OPACITY = 0.55


class MaskCanvas(QWidget):
    """The init image scaled to fit VIEW_PX, the mask painted over it; `mask` is a Grayscale8 image of its size."""

    def __init__(self, image: QImage, mask: QImage | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.image = image.convertToFormat(QImage.Format.Format_RGB888)
        self.mask = QImage(self.image.size(), QImage.Format.Format_Grayscale8)
        self.mask.fill(0)
        if mask is not None and mask.size() == self.image.size():
            self.mask = mask.convertToFormat(QImage.Format.Format_Grayscale8)
        self.undo_stack: list[QImage] = []
        self.brush_px = max(1, min(self.image.width(), self.image.height()) // 8)  # in the image's pixels
        self.scale = VIEW_PX / max(self.image.width(), self.image.height())
        self.setFixedSize(round(self.image.width() * self.scale), round(self.image.height() * self.scale))
        self.setCursor(Qt.CursorShape.CrossCursor)
        self._last: QPointF | None = None

    def _at(self, point: QPoint | QPointF) -> QPointF:
        return QPointF(point.x() / self.scale, point.y() / self.scale)

    def stroke(self, start: QPointF, end: QPointF) -> None:
        """Paint white from start to end (image pixels) with the round brush."""
        painter = QPainter(self.mask)
        pen = QPen(QColor(255, 255, 255), self.brush_px, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap)
        painter.setPen(pen)
        painter.drawLine(start, end)
        painter.end()
        self.update()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt's name
        if event.button() == Qt.MouseButton.LeftButton:
            self.undo_stack.append(self.mask.copy())
            self._last = self._at(event.position())
            self.stroke(self._last, self._last)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt's name
        if self._last is not None:
            point = self._at(event.position())
            self.stroke(self._last, point)
            self._last = point

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt's name
        if self._last is not None:
            self.stroke(self._last, self._at(event.position()))
        self._last = None

    def undo(self) -> None:
        if self.undo_stack:
            self.mask = self.undo_stack.pop()
            self.update()

    def clear(self) -> None:
        self.undo_stack.append(self.mask.copy())
        self.mask.fill(0)
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        target = self.rect()
        painter.drawImage(target, self.image)
        overlay = QImage(self.mask.size(), QImage.Format.Format_ARGB32)
        overlay.fill(OVERLAY)
        overlay.setAlphaChannel(self.mask)  # opaque where painted, clear elsewhere
        painter.setOpacity(OVERLAY_OPACITY)
        painter.drawImage(target, overlay)
        painter.end()

    def save(self, folder: Path) -> str:
        """The mask as a PNG named by its content (painting the same mask twice writes one file)."""
        folder.mkdir(parents=True, exist_ok=True)
        data = bytes(self.mask.constBits())
        path = folder / f"mask-{hashlib.sha256(data).hexdigest()[:16]}.png"
        if not path.exists() and not self.mask.save(str(path), "PNG"):
            raise OSError(f"cannot write {path}")
        return str(path)


class MaskPainter(QDialog):
    def __init__(self, init_image: str, mask: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Paint the mask (white: repaint)")
        start = QImage(mask) if mask else None
        self.canvas = MaskCanvas(QImage(init_image), start if start is not None and not start.isNull() else None)
        self.brush = QSpinBox(minimum=1, maximum=max(self.canvas.image.width(), self.canvas.image.height()),
                              value=self.canvas.brush_px, suffix=" px", toolTip="The brush's width, in the image's "
                                                                                "pixels")
        self.brush.valueChanged.connect(lambda v: setattr(self.canvas, "brush_px", int(v)))
        undo, clear = QPushButton("Undo"), QPushButton("Clear")
        undo.clicked.connect(self.canvas.undo)
        clear.clicked.connect(self.canvas.clear)
        tools = QHBoxLayout()
        tools.addWidget(QLabel("Brush"))
        tools.addWidget(self.brush)
        tools.addStretch(1)
        tools.addWidget(undo)
        tools.addWidget(clear)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        column = QVBoxLayout(self)
        column.addWidget(self.canvas, 0, Qt.AlignmentFlag.AlignCenter)
        column.addLayout(tools)
        column.addWidget(buttons)


def paint_mask(parent: QWidget, init_image: str, mask: str) -> str:
    """Open the painter over the init image; the saved mask's path, or "" when cancelled or not possible."""
    if not init_image or QImage(init_image).isNull():
        return ""
    dialog = MaskPainter(init_image, mask, parent)
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return ""
    return dialog.canvas.save(inputs_dir())

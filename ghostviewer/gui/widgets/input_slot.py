"""One input image of the next run (init image, mask, control image): its thumbnail with a "×" to remove it, and a
button under it to pick a file; an image file dropped on it takes its place. The slot only asks (fileChosen,
removeRequested); the editor puts the file in the model and the slot shows what the model holds."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QMouseEvent
from PySide6.QtWidgets import QFileDialog, QToolButton, QVBoxLayout, QWidget

from ghostviewer.gui.models.input_files import IMAGE_SUFFIXES, image_info, is_image_file, read_thumbnail
from ghostviewer.gui.widgets.thumbnail import Thumbnail

SLOT_PX = 56
BAD_STYLE = " QLabel { border: 2px solid #c62828; }"
IMAGE_FILTER = "Images (" + " ".join(f"*{s}" for s in IMAGE_SUFFIXES) + ")"


def dropped_images(event: QDragEnterEvent | QDropEvent) -> list[str]:
    """The local image files among what is dragged."""
    urls = event.mimeData().urls() if event.mimeData().hasUrls() else []
    return [url.toLocalFile() for url in urls if url.isLocalFile() and is_image_file(url.toLocalFile())]


class ClickThumbnail(Thumbnail):
    clicked = Signal()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt's name
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit()
        super().mousePressEvent(event)


class InputSlot(QWidget):
    fileChosen = Signal(str)
    removeRequested = Signal()

    def __init__(self, words: str, button_text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.words, self.path = words, ""
        self.setAcceptDrops(True)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(1)
        self.thumb = ClickThumbnail(SLOT_PX)
        self.remove = QToolButton(self.thumb, text="×", toolTip=f"Remove the {words}", autoRaise=True)
        self.remove.setStyleSheet("QToolButton { color: white; background: #c62828; font-weight: bold; "
                                  "padding: 0 3px; border-radius: 2px; }")
        self.remove.hide()
        self.pick = QToolButton(text=button_text, toolTip=f"Choose the {words} (or drop an image file here)")
        self.pick.setStyleSheet("font-size: 8pt")
        column.addWidget(self.thumb, 0, Qt.AlignmentFlag.AlignHCenter)
        column.addWidget(self.pick, 0, Qt.AlignmentFlag.AlignHCenter)
        self.thumb.clicked.connect(self.choose)
        self.pick.clicked.connect(self.choose)
        self.remove.clicked.connect(self.removeRequested)
        self.show_file("", "")

    def choose(self) -> None:
        start = str(Path(self.path).parent) if self.path else ""
        path, _ = QFileDialog.getOpenFileName(self, f"Choose the {self.words}", start, IMAGE_FILTER)
        if path:
            self.fileChosen.emit(path)

    def show_file(self, path: str, problem: str) -> None:
        """Show the model's file ("" none) and, outlined, why the run would refuse it."""
        if path != self.path or not path:
            self.path = path
            image = read_thumbnail(path) if path else None
            self.thumb.set_image(image, "drop or\nclick" if not path else "cannot\nread it")
        self.remove.setVisible(bool(path))
        self.remove.adjustSize()
        self.remove.move(self.thumb.width() - self.remove.width(), 0)
        info = image_info(path, "") if path else None
        size = f" · {info.size[0]}×{info.size[1]}" if info is not None and info.size else ""
        tip = f"{self.words}: {path}{size}" if path else f"No {self.words}: click, or drop an image file here"
        self.thumb.setToolTip(f"{problem}\n{tip}" if problem else tip)
        self.thumb.setStyleSheet(self.thumb.styleSheet().replace(BAD_STYLE, "") + (BAD_STYLE if problem else ""))

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt's name
        if dropped_images(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt's name
        images = dropped_images(event)
        if images:
            self.fileChosen.emit(images[0])
            event.acceptProposedAction()

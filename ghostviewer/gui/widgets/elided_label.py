"""A one-line label that never clips a glyph: cut with '…' to the width it is given, the whole text in its
tooltip. Its minimum width is small, so a long text (a path, a library's error) cannot push a dock wider."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy, QWidget


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None,
                 mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight) -> None:
        super().__init__(parent)
        self.full_text, self.mode = "", mode
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.set_full_text(text)

    def set_full_text(self, text: str, tip: str | None = None) -> None:
        self.full_text = " ".join(str(text).split())
        self.setToolTip(self.full_text if tip is None else tip)
        self._elide()

    def elided(self) -> bool:
        return self.text() != self.full_text

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(self.fontMetrics().horizontalAdvance("…") * 4, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        margins = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self.full_text) + margins.left() + margins.right() + 4
        return QSize(width, super().sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        room = self.contentsRect().width() - 2
        text = self.fontMetrics().elidedText(self.full_text, self.mode, max(room, 1))
        if self.text() != text:
            super().setText(text)


class ElidedButton(QPushButton):
    """A flat, bold, left-aligned button whose text is cut with '…' to its width (the whole text in the tooltip)."""

    def __init__(self, toolTip: str = "") -> None:  # noqa: N803 - Qt's keyword
        super().__init__(flat=True)
        self.full_text, self.hint = "", toolTip
        self.setStyleSheet("text-align: left; font-weight: bold")
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def set_full_text(self, text: str) -> None:
        self.full_text = text
        self.setToolTip(f"{text}\n{self.hint}" if text else self.hint)
        self._elide()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        font = QFont(self.font())
        font.setBold(True)
        self.setText(QFontMetrics(font).elidedText(self.full_text, Qt.TextElideMode.ElideRight,
                                                   max(self.width() - 16, 1)))

"""The log dock: everything GhostViewer and the engine process logged, errors with their details."""

from __future__ import annotations

from PySide6.QtWidgets import QPlainTextEdit, QWidget

MAX_LINES = 5000


class LogPanel(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setMaximumBlockCount(MAX_LINES)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setPlaceholderText("Log: engine output, warnings and error details appear here.")

    def append_record(self, level: str, line: str) -> None:
        self.appendPlainText(line)

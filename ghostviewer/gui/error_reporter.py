"""Errors become a one-line dialog and a full entry in the log; no traceback ever reaches the screen."""

from __future__ import annotations

import logging
import sys
import traceback
from types import TracebackType

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from ghostviewer.gui import messages

log = logging.getLogger("ghostviewer.gui")


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 240 else text[:239] + "…"


class ErrorReporter(QObject):
    sigReported = Signal(str)

    def __init__(self, parent: QObject | None = None, dialogs: bool = True) -> None:
        super().__init__(parent)
        self.dialogs = dialogs
        self.parent_widget: QWidget | None = None
        self.messages: list[str] = []
        self._open: list[QMessageBox] = []

    @property
    def last_message(self) -> str | None:
        return self.messages[-1] if self.messages else None

    def report(self, message: str, details: str | None = None) -> None:
        """Log message (+ details), then show the message alone in a non-blocking dialog."""
        self.messages.append(message)
        log.error("%s%s", message, f"\n{details}" if details else "")
        self.sigReported.emit(message)
        if not self.dialogs:
            return
        box = QMessageBox(QMessageBox.Icon.Warning, "GhostViewer", message, QMessageBox.StandardButton.Ok,
                          self.parent_widget)
        box.finished.connect(lambda _result, box=box: self._closed(box))
        self._open.append(box)
        box.open()  # non-blocking: the run queue and timers keep going

    def _closed(self, box: QMessageBox) -> None:
        if box in self._open:
            self._open.remove(box)
        box.deleteLater()

    def install_excepthook(self) -> None:
        """Uncaught exceptions in slots: a one-line dialog, the traceback in the log."""
        def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            if issubclass(kind, KeyboardInterrupt):
                sys.__excepthook__(kind, exc, tb)
                return
            details = "".join(traceback.format_exception(kind, exc, tb))
            self.report(messages.UNEXPECTED.format(message=one_line(exc)), details)

        sys.excepthook = hook

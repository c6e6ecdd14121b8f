"""Errors become one line on screen and a full entry in the log; no traceback ever reaches the screen.

`report`: GhostViewer's own failures (the engine died, a run failed, an unexpected error) — a window-modal
message box, opened without blocking the event loop; a message that has a remedy (the engine died: Restart
engine) offers it as a button (`offer`). `note`: a problem with something the user opened (a broken or hostile
run folder, study or bundle) — the status bar only, never a dialog."""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable
from types import TracebackType

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from ghostviewer.gui import messages

log = logging.getLogger("ghostviewer.gui")


def one_line(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split()) or (exc if isinstance(exc, str) else type(exc).__name__)
    return text if len(text) <= 240 else text[:239] + "…"


def first_line(text: str, limit: int = 160) -> str:
    """The first line of a possibly long message (a library's raw exception), cut at `limit` with '…': what a
    user reads on screen; the whole text goes behind Show details and to the log."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = " ".join((lines[0] if lines else "").split()) or "unknown error"
    return line if len(line) <= limit else line[:limit - 1] + "…"


class ErrorReporter(QObject):
    sigReported = Signal(str)  # a line for the status bar (reported or noted)

    def __init__(self, parent: QObject | None = None, dialogs: bool = True) -> None:
        super().__init__(parent)
        self.dialogs = dialogs
        self.parent_widget: QWidget | None = None
        self.messages: list[str] = []  # every line reported or noted, in order
        self.notes: list[str] = []  # the lines said in the status bar only (no dialog)
        self._open: list[QMessageBox] = []
        self._offers: list[tuple[str, str, Callable[[], None]]] = []  # (message template, button, action)

    def offer(self, template: str, label: str, action: Callable[[], None]) -> None:
        """Messages made from `template` (a messages.py template) get a button `label` that runs `action`."""
        self._offers.append((template.split("{", 1)[0], label, action))

    def remedies(self, message: str) -> list[tuple[str, Callable[[], None]]]:
        return [(label, action) for prefix, label, action in self._offers if message.startswith(prefix)]

    @property
    def last_message(self) -> str | None:
        return self.messages[-1] if self.messages else None

    def note(self, message: str, details: str | None = None) -> None:
        """Log message (+ details) as a warning and say it in the status bar (sigReported); no dialog."""
        self.messages.append(message)
        self.notes.append(message)
        log.warning("%s%s", message, f"\n{details}" if details else "")
        self.sigReported.emit(message)

    def report(self, message: str, details: str | None = None, show_details: bool = False) -> None:
        """Log message (+ details), then show the message alone in a window-modal box that does not block
        the event loop (open(), not exec()): the run queue and timers keep going. `show_details`: the details
        are a message for the user too (a library's full error text, never a traceback), behind Show details."""
        self.messages.append(message)
        log.error("%s%s", message, f"\n{details}" if details else "")
        self.sigReported.emit(message)
        if not self.dialogs:
            return
        for shown in self._open:  # the same message again (the engine died twice): one box, brought forward
            if message in shown.text().split("\n\n"):
                shown.raise_()
                return
        if self._open:  # another message while a box is open (the engine died mid-sweep: the sweep and the
            self._fold(self._open[-1], message)  # engine both say so): one box saying both, its remedies kept
            return
        box = QMessageBox(QMessageBox.Icon.Warning, "GhostViewer", message, QMessageBox.StandardButton.Ok,
                          self.parent_widget)
        if show_details and details and details.strip() != message.strip():
            box.setDetailedText(details)  # Qt's own "Show Details…" button
        for label, action in self.remedies(message):
            button = box.addButton(label, QMessageBox.ButtonRole.AcceptRole)
            button.clicked.connect(lambda _checked=False, action=action: action())
            box.setDefaultButton(button)
        box.setEscapeButton(QMessageBox.StandardButton.Ok)  # Esc and the title bar's close button: OK
        box.finished.connect(lambda _result, box=box: self._closed(box))
        self._open.append(box)
        box.open()  # window-modal, but not blocking: the run queue and timers keep going

    def _fold(self, box: QMessageBox, message: str) -> None:
        box.setText(f"{box.text()}\n\n{message}")
        labels = {button.text() for button in box.buttons()}
        for label, action in self.remedies(message):
            if label not in labels:
                button = box.addButton(label, QMessageBox.ButtonRole.AcceptRole)
                button.clicked.connect(lambda _checked=False, action=action: action())
                box.setDefaultButton(button)
        box.raise_()

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

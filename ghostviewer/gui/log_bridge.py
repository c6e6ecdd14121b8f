"""Python logging into the log dock (thread-safe through a queued Qt signal) and into a log file."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class LogBridge(QObject):
    sigRecord = Signal(str, str)  # level name, formatted line


class QtLogHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.bridge = LogBridge()
        self.setFormatter(logging.Formatter(LOG_FORMAT, "%H:%M:%S"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.bridge.sigRecord.emit(record.levelname, self.format(record))
        except RuntimeError:
            pass  # the bridge is gone (window closed)


def install_logging(log_file: Path | None) -> QtLogHandler:
    """Route the 'ghostviewer' loggers to the window (and to log_file when given); returns the Qt handler."""
    root = logging.getLogger("ghostviewer")
    root.setLevel(logging.INFO)
    for handler in list(root.handlers):
        if isinstance(handler, QtLogHandler):
            root.removeHandler(handler)
    handler = QtLogHandler()
    root.addHandler(handler)
    if log_file is not None and not any(isinstance(h, logging.FileHandler) for h in root.handlers):
        try:
            file_handler = logging.FileHandler(log_file, encoding="utf-8")
        except OSError:
            return handler
        file_handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(file_handler)
    return handler

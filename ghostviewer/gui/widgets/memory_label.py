"""Status-bar memory: this window's and the engine process's resident memory, refreshed every 2 s."""

from __future__ import annotations

from collections.abc import Callable

import psutil
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QWidget

INTERVAL_MS = 2000


def _rss_mb(pid: int | None) -> float | None:
    if not pid:
        return None
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except (psutil.Error, OSError):
        return None


class MemoryLabel(QLabel):
    def __init__(self, engine_pid: Callable[[], int | None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._engine_pid = engine_pid
        self._own = psutil.Process()
        self.setToolTip("Resident memory of the window and of the engine process")
        self._timer = QTimer(self, interval=INTERVAL_MS)
        self._timer.timeout.connect(self.update_text)
        self._timer.start()
        self.update_text()

    def update_text(self) -> None:
        own = self._own.memory_info().rss / 2**20
        engine = _rss_mb(self._engine_pid())
        engine_text = "—" if engine is None else f"{engine:.0f} MB"
        self.setText(f"memory: window {own:.0f} MB · engine {engine_text}")

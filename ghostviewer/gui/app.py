"""`ghostviewer` / `ghostviewer gui [PATH]`: the desktop app. The window is on screen before the engine
process has even started importing torch; this process never imports torch at all."""

from __future__ import annotations

import gc
import signal
import sys
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.app_state import build_state
from ghostviewer.gui.dialogs.welcome import welcome_once
from ghostviewer.gui.link.engine_client import EngineClient
from ghostviewer.gui.log_bridge import install_logging
from ghostviewer.gui.main_window import MainWindow
from ghostviewer.paths import log_dir


def application() -> QApplication:
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        app = QApplication([sys.argv[0] if sys.argv else "ghostviewer"])
    app.setApplicationName("GhostViewer")
    app.setOrganizationName("ghostviewer")
    app.setWindowIcon(QIcon(str(Path(__file__).resolve().parents[1] / "resources" / "icon.png")))
    return app


def create_window(settings: AppSettings | None = None, dialogs: bool = True, log_file: Path | None = None,
                  engine: EngineClient | None = None) -> MainWindow:
    """A wired window (engine not started yet: call `window.state.controller.start_engine()` after show)."""
    handler = install_logging(log_file)
    window = MainWindow(build_state(settings, engine=engine, dialogs=dialogs))
    handler.bridge.sigRecord.connect(window.log_panel.append_record)
    handler.bridge.setParent(window)  # lives as long as the window
    return window


def settle_memory() -> None:
    """Once the window is made: its tens of thousands of long-lived Python objects (widgets, plots, actions) are
    left out of the cyclic collector's full passes (gc.freeze), which otherwise walk them all — 45-90 ms pauses
    while a 10,000-run history fills or scrolls. Once per process (what is frozen is never collected)."""
    if not _SETTLED:
        _SETTLED.append(True)
        gc.freeze()


_SETTLED: list[bool] = []


def close_on_signals(window: MainWindow) -> None:
    """Ctrl+C or SIGTERM closes the window properly (settings saved, engine stopped) instead of a traceback."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: window.close())
    wake = QTimer(window)  # the event loop is C++; this lets Python run its signal handlers promptly
    wake.timeout.connect(lambda: None)
    wake.start(250)


def main(path: str | None = None) -> int:
    app = application()
    try:
        log_file: Path | None = log_dir() / "ghostviewer-gui.log"
    except OSError:
        log_file = None
    window = create_window(log_file=log_file)
    settle_memory()
    state = window.state
    state.reporter.install_excepthook()
    window.show()
    close_on_signals(window)
    QTimer.singleShot(0, state.controller.start_engine)  # after show(): torch loads while the window is up
    QTimer.singleShot(0, state.history.refresh)
    QTimer.singleShot(0, lambda: welcome_once(window))  # the first launch only: the guided hunt
    if path:
        QTimer.singleShot(0, lambda: state.opener.open_path(path))
    return int(app.exec())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))

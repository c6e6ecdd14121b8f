"""File ▸ Watch folder…: the Runs history follows a runs folder that a running program writes into (a program run
under `ghostviewer record --`, a service that calls `ghostviewer.watch(pipe)`, a sweep in another process).

The history model reads the folder again every second, off the GUI thread (HistoryModel.watch); the panel
updates its rows in place. Stopping — the action again, the Stop on the history's watching line — shows the
folder the history showed before (the runs folder). The folder and whether it was being watched are remembered:
a window closed while watching watches it again at the next launch (when it still exists).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.models.history_model import HistoryModel

WATCHING = "Watching {folder}: the history shows its runs as they are written"
STOPPED = "Stopped watching {folder}; the history shows {runs} again"
NOT_A_FOLDER = "Cannot watch {folder}: it is not a folder"


class FolderWatch(QObject):
    sigMessage = Signal(str)  # a line for the status bar

    def __init__(self, history: HistoryModel, settings: AppSettings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.history, self.settings = history, settings
        self._before: Path | None = None  # the folder the history showed before watching
        history.watchingChanged.connect(self._on_watching)

    @property
    def folder(self) -> Path | None:
        """The folder watched now, or None."""
        return self.history.watched

    def start(self, folder: str | Path) -> bool:
        folder = Path(folder)
        if not folder.is_dir():
            self.sigMessage.emit(NOT_A_FOLDER.format(folder=folder))
            return False
        if self.history.watched is None:
            self._before = self.history.runs_dir
        self.history.watch(folder)
        return True

    def stop(self) -> None:
        """Back to the folder shown before watching (the runs folder)."""
        watched = self.history.watched
        if watched is None:
            return
        back = self._before or self.settings.runs_dir()
        self._before = None
        self.history.set_runs_dir(back)
        self.sigMessage.emit(STOPPED.format(folder=watched, runs=back))

    def choose(self, parent: QWidget) -> bool:
        """Ask for the folder (the one watched last offered first) and watch it."""
        last, _on = self.settings.watch_folder()
        start = last if last is not None and last.is_dir() else self.history.runs_dir
        folder = QFileDialog.getExistingDirectory(parent, "Watch a runs folder", str(start))
        return bool(folder) and self.start(folder)

    def restore(self) -> None:
        """Watch again the folder watched when the window last closed."""
        folder, on = self.settings.watch_folder()
        if on and folder is not None and folder.is_dir():
            self.start(folder)

    def _on_watching(self, folder: Path | None) -> None:
        last, _on = self.settings.watch_folder()
        self.settings.set_watch_folder(folder or last, folder is not None)
        if folder is not None:
            self.sigMessage.emit(WATCHING.format(folder=folder))
        else:
            self._before = None  # another folder was chosen meanwhile (Runs folder…): nothing to go back to


def install_folder_watch(window: Any) -> FolderWatch:
    """Wire Watch folder into the main window: the File menu's checkable action, the history's Stop, the status
    bar; watch studies picked in the history open a call in the timeline; the remembered watch resumes."""
    state, action = window.state, window.actions.watch_folder
    watch = FolderWatch(state.history, state.settings, window)

    def triggered(on: bool) -> None:
        if on:
            watch.choose(window)
        else:
            watch.stop()
        action.setChecked(state.history.watched is not None)  # a cancelled dialog leaves it off

    action.triggered.connect(triggered)
    window.history_panel.stopWatchRequested.connect(watch.stop)
    watch.sigMessage.connect(lambda text: window.statusBar().showMessage(text, 10000))
    state.history.watchingChanged.connect(lambda folder: action.setChecked(folder is not None))
    state.controller.studies.open_run = state.opener.open_run
    watch.restore()
    return watch

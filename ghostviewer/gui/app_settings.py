"""Settings remembered between sessions (QSettings, INI), versioned and migrated (STYLE 11).

GHOSTVIEWER_SETTINGS names another INI file (tests use it); GHOSTVIEWER_RUNS_DIR overrides the runs folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from ghostviewer.paths import default_runs_dir

SETTINGS_VERSION = 2
LAYOUT_VERSION = 2  # saved with the window's dock layout: a layout of another version is dropped, not restored


def migrate(settings: QSettings) -> None:
    """Bring settings written by an older GhostViewer up to SETTINGS_VERSION."""
    try:
        version = int(settings.value("version", 0))
    except (TypeError, ValueError):
        version = 0
    if version > SETTINGS_VERSION:
        return  # written by a newer GhostViewer: read what we know, leave the rest alone
    if version < 1:
        pass  # version 0 never shipped; nothing to convert
    if version < 2:
        _forget_ghost(settings)  # version 1 remembered the Ghost choice across launches: never again
        settings.remove("window/state")  # a layout of the old docks would be restored mangled
    settings.setValue("version", SETTINGS_VERSION)


def _forget_ghost(settings: QSettings) -> None:
    raw = settings.value("prompt")
    try:
        prompt = json.loads(str(raw)) if raw is not None else None
    except (ValueError, RecursionError):  # a settings file edited by hand: JSON nested too deep
        return
    if isinstance(prompt, dict) and "fault" in prompt:
        prompt.pop("fault")
        settings.setValue("prompt", json.dumps(prompt))


INPUTS_FOLDER = "inputs"  # beside the settings file: masks painted in the window (a run keeps its own copy)


def inputs_dir(settings_file: Path | None = None) -> Path:
    """Where the window keeps the input files it makes: beside the settings file (GHOSTVIEWER_SETTINGS, else the
    user's GhostViewer settings), never in the runs folder."""
    if settings_file is None:
        named = os.environ.get("GHOSTVIEWER_SETTINGS")
        settings_file = Path(named) if named else Path(QSettings(
            QSettings.Format.IniFormat, QSettings.Scope.UserScope, "ghostviewer", "ghostviewer").fileName())
    return settings_file.parent / INPUTS_FOLDER


class AppSettings:
    def __init__(self, path: str | Path | None = None) -> None:
        path = path or os.environ.get("GHOSTVIEWER_SETTINGS")
        if path:
            self.qsettings = QSettings(str(path), QSettings.Format.IniFormat)
        else:
            self.qsettings = QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope,
                                       "ghostviewer", "ghostviewer")
        migrate(self.qsettings)

    # -- JSON values (INI keeps lists and dicts badly) ----------------------------------------------
    def get_json(self, key: str, default: Any) -> Any:
        raw = self.qsettings.value(key)
        if raw is None:
            return default
        try:
            value = json.loads(str(raw))
        except (ValueError, RecursionError):
            return default
        return value if isinstance(value, type(default)) else default

    def set_json(self, key: str, value: Any) -> None:
        self.qsettings.setValue(key, json.dumps(value))

    def get_bytes(self, key: str) -> QByteArray | None:
        value = self.qsettings.value(key)
        return value if isinstance(value, QByteArray) else None

    def set_bytes(self, key: str, value: QByteArray) -> None:
        self.qsettings.setValue(key, value)

    def sync(self) -> None:
        self.qsettings.sync()

    # -- the runs folder ----------------------------------------------------------------------------
    def runs_dir(self) -> Path:
        """GHOSTVIEWER_RUNS_DIR, else the folder chosen in the window, else the platform's user data folder."""
        if os.environ.get("GHOSTVIEWER_RUNS_DIR"):
            return default_runs_dir()
        chosen = self.get_json("runs_dir", "")
        return Path(chosen) if chosen else default_runs_dir()

    def set_runs_dir(self, path: Path) -> None:
        self.set_json("runs_dir", str(path))

    # -- files the window makes for a run (painted masks) ---------------------------------------------
    def inputs_dir(self) -> Path:
        return inputs_dir(Path(self.qsettings.fileName()))

    # -- Watch folder -------------------------------------------------------------------------------
    def watch_folder(self) -> tuple[Path | None, bool]:
        """(the folder last watched, whether the window was watching it when it closed)."""
        value = self.get_json("watch_folder", {})
        folder = value.get("folder")
        return (Path(folder) if isinstance(folder, str) and folder else None), value.get("on") is True

    def set_watch_folder(self, folder: Path | None, on: bool) -> None:
        self.set_json("watch_folder", {"folder": "" if folder is None else str(folder), "on": on})

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

SETTINGS_VERSION = 1


def migrate(settings: QSettings) -> None:
    """Bring settings written by an older GhostViewer up to SETTINGS_VERSION."""
    try:
        version = int(settings.value("version", 0))
    except (TypeError, ValueError):
        version = 0
    if version > SETTINGS_VERSION:
        return  # written by a newer GhostViewer: read what we know, leave the rest alone
    if version < 1:
        # Version 0 never shipped; nothing to convert. Future migrations go here, one `if` per version.
        pass
    settings.setValue("version", SETTINGS_VERSION)


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
        except ValueError:
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

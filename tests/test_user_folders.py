"""During tests every folder GhostViewer would write for a user lies inside the session's temporary folder
(tests/conftest.py points them there; the session fails if the real ones change)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ghostviewer.paths import default_runs_dir, log_dir

HOME = Path(os.environ["GHOSTVIEWER_TESTS_HOME"])


def _inside_home(path: str | Path) -> bool:
    return Path(path).resolve().is_relative_to(HOME.resolve())


def test_runs_and_log_folders_are_the_sessions() -> None:
    assert _inside_home(default_runs_dir()), default_runs_dir()
    assert _inside_home(log_dir()), log_dir()


def test_the_gui_settings_file_is_the_sessions(qapp) -> None:  # noqa: ANN001 - pytest-qt's fixture
    from ghostviewer.gui.app_settings import AppSettings

    assert _inside_home(AppSettings().qsettings.fileName())


def test_platform_folders_are_the_sessions() -> None:
    from platformdirs import user_cache_dir, user_config_dir, user_data_dir, user_log_dir, user_state_dir

    for folder in (user_data_dir, user_log_dir, user_state_dir, user_config_dir, user_cache_dir):
        assert _inside_home(folder("ghostviewer", appauthor=False)), folder.__name__


@pytest.mark.parametrize("variable", ["GHOSTVIEWER_RUNS_DIR", "GHOSTVIEWER_LOG_DIR", "GHOSTVIEWER_SETTINGS"])
def test_a_process_the_tests_start_inherits_the_sessions_folders(variable: str) -> None:
    code = "import os, sys; print(os.environ.get(sys.argv[1], ''))"
    done = subprocess.run([sys.executable, "-c", code, variable], capture_output=True, text=True, timeout=60,
                          cwd=Path("/").resolve())
    assert done.returncode == 0 and done.stdout.strip() and _inside_home(done.stdout.strip()), done


def test_the_default_qt_settings_file_is_the_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without GHOSTVIEWER_SETTINGS (the packaged app's case) the INI goes to XDG_CONFIG_HOME, also moved."""
    monkeypatch.delenv("GHOSTVIEWER_SETTINGS")
    code = ("from PySide6.QtCore import QSettings; print(QSettings(QSettings.Format.IniFormat, "
            "QSettings.Scope.UserScope, 'ghostviewer', 'ghostviewer').fileName())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and _inside_home(done.stdout.strip()), done

"""Where GhostViewer keeps things on the user's machine (torch-free: the GUI uses it too)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from platformdirs import user_data_dir, user_log_dir


def default_runs_dir() -> Path:
    """GHOSTVIEWER_RUNS_DIR, else the platform's user data folder (…/ghostviewer/runs)."""
    override = os.environ.get("GHOSTVIEWER_RUNS_DIR")
    return Path(override) if override else Path(user_data_dir("ghostviewer", appauthor=False)) / "runs"


def log_dir() -> Path:
    path = Path(os.environ.get("GHOSTVIEWER_LOG_DIR") or user_log_dir("ghostviewer", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def resources_dir() -> Path:
    """The project's resources/ folder: beside the package in a checkout, inside the bundle in a frozen app."""
    bundle = getattr(sys, "_MEIPASS", None)  # set by PyInstaller (packaging/ghostviewer.spec puts resources/ there)
    return (Path(bundle) if bundle else Path(__file__).resolve().parents[1]).resolve() / "resources"

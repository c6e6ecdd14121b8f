"""Help ▸ About: the versions a bug report needs (Python, torch, diffusers, Qt, GhostViewer), the engine's
device, and every keyboard shortcut. torch's version comes from the engine's `ready` event: this process never
imports torch (nor diffusers: its version is read from the installed package's metadata)."""

from __future__ import annotations

import html
import platform
from importlib import metadata
from typing import Any

import PySide6
from PySide6.QtCore import qVersion
from PySide6.QtWidgets import QMessageBox, QWidget

from ghostviewer import __version__
from ghostviewer.gui.actions import shortcut_lines


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions(state: Any) -> list[tuple[str, str]]:
    engine = state.engine.info or {}
    info = state.pipeline.info or {}
    device = str(info.get("device") or "") if state.pipeline.status == "loaded" else ""
    return [
        ("GhostViewer", __version__),
        ("Python", platform.python_version()),
        ("torch (engine)", str(engine.get("torch") or "engine not ready")),
        ("diffusers", package_version("diffusers")),
        ("Qt", f"{qVersion()} (PySide6 {PySide6.__version__})"),
        ("Engine device", device or "no pipeline loaded"),
        ("Devices found", ", ".join(engine.get("devices") or []) or "?"),
    ]


def about_html(state: Any, actions: Any) -> str:
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td><b>{html.escape(v)}</b></td></tr>" for k, v in versions(state))
    keys = "".join(f"<tr><td><b>{html.escape(k)}</b></td><td>{html.escape(v)}</td></tr>"
                   for k, v in shortcut_lines(actions))
    return (f"<p><b>GhostViewer {__version__}</b> — a debugger for intermittent bugs in diffusion pipelines.</p>"
            f"<table cellspacing=4>{rows}</table><p><b>Shortcuts</b></p><table cellspacing=2>{keys}</table>")


def about_text(state: Any, actions: Any) -> str:
    """The same, as plain text (tests, copy and paste into a bug report)."""
    lines = [f"{k}: {v}" for k, v in versions(state)] + [f"{k}  {v}" for k, v in shortcut_lines(actions)]
    return "\n".join(lines)


def show_about(parent: QWidget, state: Any, actions: Any) -> QMessageBox:
    box = QMessageBox(QMessageBox.Icon.NoIcon, "About GhostViewer", about_html(state, actions),
                      QMessageBox.StandardButton.Ok, parent)
    box.setDetailedText(about_text(state, actions))
    box.open()
    return box

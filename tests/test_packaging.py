"""packaging/: the launcher entry, its icons, the per-user installer and the frozen app's engine dispatch (no build)."""

from __future__ import annotations

import configparser
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"


@pytest.fixture(scope="module")
def installer():
    spec = importlib.util.spec_from_file_location("install_launcher", PACKAGING / "install_launcher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(text: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in .desktop files
    parser.read_string(text)
    return parser["Desktop Entry"]


def test_desktop_entry_parses_and_names_existing_icons():
    entry = _entry((PACKAGING / "ghostviewer.desktop").read_text(encoding="utf-8"))
    assert entry["Type"] == "Application" and entry["Name"] == "GhostViewer"
    assert entry["Exec"].split()[-2:] == ["gui", "%f"]  # a dropped path opens in the window
    assert "Development" in entry["Categories"].split(";") and entry["MimeType"].endswith(";")
    icon = entry["Icon"]
    assert (PACKAGING / "icons" / f"{icon}.svg").is_file()
    for size in (16, 32, 48, 64, 128, 256):
        png = PACKAGING / "icons" / f"{icon}-{size}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (ROOT / "ghostviewer" / "resources" / "icon.png").read_bytes() == (
        PACKAGING / "icons" / f"{icon}-256.png").read_bytes()


def test_installer_writes_the_launcher_and_icons_then_removes_them(installer, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    app = tmp_path / "My Apps" / "GhostViewer"
    app.parent.mkdir()
    app.write_text("#!/bin/sh\n")
    app.chmod(0o755)

    assert installer.main(["--app", str(app)]) == 0
    share = tmp_path / ".local" / "share"
    desktop = share / "applications" / "ghostviewer.desktop"
    entry = _entry(desktop.read_text(encoding="utf-8"))
    assert entry["Exec"] == f'"{app}" gui %f' and entry["TryExec"] == str(app)
    icons = share / "icons" / "hicolor"
    expected = [desktop, icons / "scalable" / "apps" / "ghostviewer.svg"]
    expected += [icons / f"{n}x{n}" / "apps" / "ghostviewer.png" for n in (16, 32, 48, 64, 128, 256)]
    assert all(path.is_file() for path in expected)
    out = capsys.readouterr().out
    assert all(f"wrote {path}" in out for path in expected)

    assert installer.main(["--uninstall"]) == 0
    assert not any(path.exists() for path in expected)
    assert f"removed {desktop}" in capsys.readouterr().out


def test_frozen_dispatch_routes_to_the_engine_server():
    from ghostviewer import cli
    from ghostviewer.engine import server
    from ghostviewer.gui.link.engine_client import FROZEN_ENGINE_FLAG

    assert FROZEN_ENGINE_FLAG == cli.ENGINE_SERVER_FLAG
    assert cli.entry_point([cli.ENGINE_SERVER_FLAG]) is server.main
    assert cli.entry_point(["demo", "--list-faults"]) is not server.main  # everything else is the CLI


def test_engine_client_uses_the_app_executable_when_frozen(qapp, monkeypatch):
    from ghostviewer.gui.link.engine_client import ENGINE_MODULE, FROZEN_ENGINE_FLAG, EngineClient

    assert EngineClient().arguments == ["-m", ENGINE_MODULE]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    client = EngineClient()
    assert (client.program, client.arguments) == (sys.executable, [FROZEN_ENGINE_FLAG])


def test_resources_are_found_in_a_frozen_bundle(tmp_path, monkeypatch):
    from ghostviewer.paths import resources_dir

    assert (resources_dir() / "demo-pipeline" / "model_index.json").is_file()
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert resources_dir() == tmp_path.resolve() / "resources"

"""Install (or remove) GhostViewer's desktop launcher and icons for the current user — no root needed.

    python packaging/install_launcher.py              # the packaged app if dist/GhostViewer exists, else the venv's
    python packaging/install_launcher.py --app PATH   # a given executable (the packaged app moved elsewhere, …)
    python packaging/install_launcher.py --uninstall

Writes $XDG_DATA_HOME (default ~/.local/share)/applications/ghostviewer.desktop, whose Exec runs the chosen
executable as `<exe> gui %f` (a folder, bundle or prompt list dropped on the launcher opens in the app), and the
icons under …/icons/hicolor/<size>/apps/. Prints every path it writes or removes. Standard library only, so the
system Python can run it.
"""

from __future__ import annotations

import argparse
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DESKTOP_FILE = HERE / "ghostviewer.desktop"
ICONS = HERE / "icons"
SIZES = (16, 32, 48, 64, 128, 256)
APP_ID = "ghostviewer"
PACKAGED_APP = ROOT / "dist" / "GhostViewer" / "GhostViewer"
VENV_APP = ROOT / ".venv" / "bin" / "ghostviewer"


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def icon_sources() -> dict[str, Path]:
    """Icon theme folder (relative to icons/hicolor) → the file in packaging/icons."""
    sources = {f"{size}x{size}/apps/{APP_ID}.png": ICONS / f"{APP_ID}-{size}.png" for size in SIZES}
    sources[f"scalable/apps/{APP_ID}.svg"] = ICONS / f"{APP_ID}.svg"
    return sources


def targets(base: Path | None = None) -> dict[str, Path]:
    """Every file the installer writes, by a short name."""
    base = base or data_home()
    found = {"desktop": base / "applications" / f"{APP_ID}.desktop"}
    found.update({rel: base / "icons" / "hicolor" / rel for rel in icon_sources()})
    return found


def default_app() -> Path:
    """The packaged app when it has been built, else the `ghostviewer` command of this checkout's venv (or PATH)."""
    if PACKAGED_APP.is_file():
        return PACKAGED_APP
    if VENV_APP.is_file():
        return VENV_APP
    beside = Path(sys.executable).parent / "ghostviewer"  # run by a venv's python: that venv's command
    if beside.is_file():
        return beside
    on_path = shutil.which("ghostviewer")
    if on_path:
        return Path(on_path)
    raise SystemExit("install_launcher: no GhostViewer found — run `make package` (or `make setup`), or pass --app")


def exec_quote(arg: str) -> str:
    """Quote one argument for a .desktop Exec line (Desktop Entry spec, 'The Exec key')."""
    arg = arg.replace("%", "%%")
    if not any(ch in arg for ch in ' \t\n"\'\\><~|&;$*?#()`'):
        return arg
    escaped = "".join("\\" + ch if ch in '"`$\\' else ch for ch in arg)
    return f'"{escaped}"'


def desktop_entry(app: Path) -> str:
    """packaging/ghostviewer.desktop with Exec and TryExec pointing at `app`."""
    lines = []
    for line in DESKTOP_FILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("Exec="):
            line = f"Exec={exec_quote(str(app))} gui %f"
        elif line.startswith("TryExec="):
            line = f"TryExec={app}"
        lines.append(line)
    text = "\n".join(lines) + "\n"
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)  # still a well-formed entry
    return text


def refresh_caches(base: Path) -> None:
    """Tell the desktop about the change, where the tools exist (harmless where they do not)."""
    for command in (["update-desktop-database", "-q", str(base / "applications")],
                    ["gtk-update-icon-cache", "-q", "-t", "-f", str(base / "icons" / "hicolor")]):
        if shutil.which(command[0]):
            subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def install(app: Path, base: Path | None = None) -> list[Path]:
    base = base or data_home()
    paths = targets(base)
    written = []
    desktop = paths.pop("desktop")
    desktop.parent.mkdir(parents=True, exist_ok=True)
    desktop.write_text(desktop_entry(app), encoding="utf-8")
    desktop.chmod(0o755)  # some desktops only launch entries marked executable
    written.append(desktop)
    for rel, source in icon_sources().items():
        target = paths[rel]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        written.append(target)
    refresh_caches(base)
    return written


def uninstall(base: Path | None = None) -> list[Path]:
    base = base or data_home()
    removed = []
    for path in targets(base).values():
        if path.is_file():
            path.unlink()
            removed.append(path)
    refresh_caches(base)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--app", type=Path, help="the executable the launcher runs (default: packaged app, else venv)")
    parser.add_argument("--uninstall", action="store_true", help="remove the launcher and icons")
    args = parser.parse_args(argv)
    if args.uninstall:
        removed = uninstall()
        for path in removed:
            print(f"removed {path}")
        if not removed:
            print("nothing to remove: the launcher was not installed")
        return 0
    app = (args.app or default_app()).expanduser().resolve()
    if not (app.is_file() and os.access(app, os.X_OK)):
        raise SystemExit(f"install_launcher: {app} is not an executable file")
    for path in install(app):
        print(f"wrote {path}")
    print(f"GhostViewer is in the applications menu; it runs {app}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

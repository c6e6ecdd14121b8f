"""Render packaging/icons/ghostviewer.svg to the PNG sizes a desktop wants, and the window icon.

    .venv/bin/python packaging/render_icons.py

Writes packaging/icons/ghostviewer-{16,32,48,64,128,256}.png and ghostviewer/resources/icon.png (the 256 px one,
package data: the window icon). Uses Qt's own SVG renderer, offscreen: no display needed. The PNGs are committed;
run this again only after changing the SVG.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ICONS = ROOT / "packaging" / "icons"
SVG = ICONS / "ghostviewer.svg"
SIZES = (16, 32, 48, 64, 128, 256)
WINDOW_ICON = ROOT / "ghostviewer" / "resources" / "icon.png"


def png_path(size: int) -> Path:
    return ICONS / f"ghostviewer-{size}.png"


def render(svg: Path = SVG, sizes: tuple[int, ...] = SIZES) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (keeps Qt's gui state alive)
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: {svg} is not a valid SVG")
    written = []
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        path = png_path(size)
        if not image.save(str(path)):
            raise SystemExit(f"render_icons: could not write {path}")
        written.append(path)
    WINDOW_ICON.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(png_path(max(sizes)), WINDOW_ICON)
    return [*written, WINDOW_ICON]


if __name__ == "__main__":
    for path in render():
        print(path.relative_to(ROOT))

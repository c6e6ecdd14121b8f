"""The sweep gallery's prompt × seed grid in the real window after Reset layout, as a sweep raises it: at 1280×720
a sweep of 10, 20 or 50 seeds keeps every column whole — the gallery fits its dock (the dock never scrolls it, which
hid the grid's last column and scroll bar), the cells are at least 64 px, the grid shows as many whole columns as
fit and scrolls a column at a time to the last one — and at 1366×768 the cells are at least 64 px with a failing
run's badge readable (a red band as tall as a line of text, its word drawn in white).

The study is a real sweep study (StudyWriter) whose members are two real demo runs made in-process — a healthy one
and a nan-latents one on every seed ending in 7 — so the thumbnails are real final images."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QScrollArea

from ghostviewer.gui.widgets.sweep_gallery import BADGE_BAD, GRID_CELL, raise_dock
from ghostviewer.record import RunRecord, StudyWriter
from tests.gui.demo_runs import demo_run
from tests.gui.live_window import needs_demo

pytestmark = needs_demo

PROMPTS = ["a red circle on a blue background", "a green square on a white background",
           "a yellow star on a purple background"]


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """{seeds: a sweep study of the three prompts × seeds 0..seeds-1}; seeds ending in 7 fail (nan)."""
    folder = tmp_path_factory.mktemp("sweep-room")
    healthy = demo_run(tmp_path_factory, folder / "made", PROMPTS[0], seed=3, steps=2)
    failing = demo_run(tmp_path_factory, folder / "made", PROMPTS[0], seed=7, steps=2, faults=["nan-latents"])
    summaries = {run: RunRecord(run).summary() for run in (healthy, failing)}
    assert summaries[failing]["verdict"]["label"] == "nan"
    made: dict[int, Path] = {}
    for seeds in (10, 20, 50):
        study = StudyWriter.create(folder / f"studies-{seeds}", "sweep", {"seeds": f"0-{seeds - 1}"},
                                   total=seeds * len(PROMPTS))
        inside = {run: Path(shutil.copytree(run, study.runs_dir / run.name)) for run in (healthy, failing)}
        for prompt in PROMPTS:  # a study lists runs inside its folder: each cell one of the two copies
            for seed in range(seeds):
                run = failing if seed % 10 == 7 else healthy
                study.add_run(inside[run], {"prompt": prompt, "seed": seed}, summary=summaries[run])
        study.set_progress(seeds * len(PROMPTS))
        study.finish("done")
        made[seeds] = study.path
    return made


def _show(window, qtbot, study: Path, size: tuple[int, int]) -> Any:  # noqa: ANN001
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    window.actions.reset_layout.trigger()
    QApplication.processEvents()
    dock = next(d for d in window.docks if d.windowTitle() == "Sweep gallery")
    gallery = dock.widget()
    gallery.model.open_study(study)
    raise_dock(gallery, 380)  # what a starting sweep (or a sweep study opened from the history) does
    for _ in range(4):
        QApplication.processEvents()
    return dock, gallery


def _inside(outer: QRect, inner: QRect) -> bool:
    return outer.contains(inner.topLeft()) and outer.contains(inner.bottomRight())


def _pixels(widget: Any) -> np.ndarray:  # noqa: ANN401
    """The widget as drawn now, (H, W, 3) uint8, in logical pixels."""
    image = widget.grab().toImage().convertToFormat(QImage.Format.Format_RGB888).scaled(widget.size())
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, :image.width() * 3].reshape(image.height(), image.width(), 3).copy()


def _columns_cut(grid: Any) -> list[int]:  # noqa: ANN401
    """The columns drawn only in part at the grid's current scroll position (a column at the edge that shows only
    in part must be left blank: the view's background only)."""
    view, model = grid.viewport().rect(), grid.model()
    pixels = _pixels(grid.viewport())
    background = pixels[-1, -1].astype(int)  # below the last row: nothing drawn there
    cut = []
    for c in range(model.columnCount()):
        rect = grid.visualRect(model.index(0, c))
        if rect.intersects(view) and not _inside(view, rect):
            part = rect.intersected(view)
            drawn = pixels[part.top():part.bottom() + 1, part.left():part.right() + 1].astype(int)
            if (np.abs(drawn - background).sum(axis=-1) > 30).any():
                cut.append(c)
    return cut


@pytest.mark.parametrize("seeds", [10, 20, 50])
def test_every_seed_column_reads_whole_at_1280(window, qtbot, studies: dict[int, Path], seeds: int) -> None:  # noqa: ANN001
    dock, gallery = _show(window, qtbot, studies[seeds], (1280, 720))
    grid, model = gallery.grid, gallery.grid_model
    assert model.columnCount() == seeds
    area = dock.findChild(QScrollArea)
    assert area.horizontalScrollBar().maximum() == 0 and area.verticalScrollBar().maximum() == 0, \
        "the dock scrolls the gallery: part of the grid is out of sight"
    viewport = grid.viewport()
    shown = QRect(viewport.mapTo(window, viewport.rect().topLeft()), viewport.size())
    assert _inside(window.rect(), shown), (shown, window.rect())
    assert grid.cell_size() >= GRID_CELL[0]
    assert grid.horizontalScrollBar().isVisible()  # the way to the other seeds is on screen
    assert _columns_cut(grid) == []
    grid.horizontalScrollBar().setValue(grid.horizontalScrollBar().maximum())
    QApplication.processEvents()
    last = grid.visualRect(model.index(0, seeds - 1))
    assert _inside(viewport.rect(), last), (last, viewport.rect())
    assert _columns_cut(grid) == []
    header = grid.horizontalHeader()
    assert header.sectionViewportPosition(seeds - 1) + header.sectionSize(seeds - 1) <= header.viewport().width()


def test_thumbnails_and_badges_are_legible_at_1366(window, qtbot, studies: dict[int, Path]) -> None:  # noqa: ANN001
    _, gallery = _show(window, qtbot, studies[10], (1366, 768))
    grid, model = gallery.grid, gallery.grid_model
    side = grid.cell_size()
    assert side >= 64 and grid.rowHeight(0) == side and grid.columnWidth(0) == side
    pixels = _pixels(grid.viewport())
    cell = grid.visualRect(model.index(0, 7))  # seed 7: nan, its badge on top of the thumbnail
    assert _inside(grid.viewport().rect(), cell)
    box = pixels[cell.top():cell.bottom() + 1, cell.left():cell.right() + 1]
    red = (np.abs(box.astype(int) - (BADGE_BAD.red(), BADGE_BAD.green(), BADGE_BAD.blue())).sum(axis=-1) < 30)
    band = [y for y in range(box.shape[0]) if red[y].mean() > 0.5]  # rows mostly the badge's red (its frame too)
    text_rows = [y for y in band if (box[y] > 220).all(axis=-1).any()]
    line = grid.fontMetrics().height()
    assert len(text_rows) >= line * 0.5, (len(text_rows), line)  # the word "nan" drawn, not a strip
    assert max(band) - min(band) + 1 >= 64 * 0.8  # the thumbnail framed in red, 64 px or more

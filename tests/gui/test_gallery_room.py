"""After Reset layout, at 1280×720 and 1366×768, raising the Sweep gallery (as a sweep does) gives it a usable
height without squeezing the step previews (latents, x_t, x0) to slivers."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from ghostviewer.gui.widgets.sweep_gallery import raise_dock
from tests.gui.fake_runs import write_fake_run

SIZES = [(1280, 720), (1366, 768)]
GALLERY_MIN_PX, PANE_MIN_PX = 250, 90


@pytest.mark.parametrize("size", SIZES)
def test_a_raised_gallery_leaves_the_previews_readable(window, qtbot, gui_env: Path, size) -> None:  # noqa: ANN001
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    window.actions.reset_layout.trigger()
    QApplication.processEvents()
    window.state.opener.open_run(str(write_fake_run(gui_env, steps=4)))
    gallery = next(d for d in window.docks if d.windowTitle() == "Sweep gallery")
    raise_dock(gallery.widget())
    for _ in range(3):
        QApplication.processEvents()
    assert gallery.height() >= GALLERY_MIN_PX, gallery.height()
    heights = {name: pane.height() for name, pane in window.step_images.panes.items()}
    assert min(heights.values()) >= PANE_MIN_PX, heights
    assert window.stat_plot.height() >= 100, window.stat_plot.height()

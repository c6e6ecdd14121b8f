"""Every view readable at 1280×720 and 1366×768, with the default layout and after Reset layout: the verdict badge
is never clipped (its whole text fits inside it), the image panes' titles are cut with '…' to the pane's width with
the whole title in the tooltip, never clipped mid-glyph."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QApplication

from tests.gui.fake_runs import write_fake_run

SIZES = [(1280, 720), (1366, 768)]


def _show(window, qtbot, size: tuple[int, int], reset: bool) -> None:  # noqa: ANN001
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    QApplication.processEvents()
    if reset:
        window.actions.reset_layout.trigger()
        QApplication.processEvents()


def _badge_fits(badge) -> bool:  # noqa: ANN001
    font = QFont(badge.font())
    font.setBold(True)
    return badge.width() >= QFontMetrics(font).horizontalAdvance(badge.text()) + 2 * 10


@pytest.mark.parametrize("reset", [False, True])
@pytest.mark.parametrize("size", SIZES)
def test_the_verdict_badge_is_never_clipped(window, qtbot, gui_env: Path, size, reset: bool) -> None:  # noqa: ANN001
    _show(window, qtbot, size, reset)
    run = write_fake_run(gui_env, steps=93, finish=None)  # killed: "incomplete · 93/93"
    window.state.opener.open_run(str(run))
    window.timeline_bar.show_replay({"reproduced": False, "seed": 7, "first_divergence": {}})
    QApplication.processEvents()
    badge = window.timeline_bar.badge
    assert badge.text().startswith("incomplete · ") and badge.isVisible()
    assert _badge_fits(badge), (badge.text(), badge.width())
    for text in ("cancelled · 93/100", "running · 999/1000"):
        from ghostviewer.gui.models.timeline_model import Badge

        badge.show_badge(Badge(text, "cancelled"))
        QApplication.processEvents()
        assert _badge_fits(badge), (text, badge.width())
    assert window.timeline_bar.slider.width() >= 100


@pytest.mark.parametrize("reset", [False, True])
@pytest.mark.parametrize("size", SIZES)
def test_pane_titles_are_elided_not_clipped(window, qtbot, gui_env: Path, size, reset: bool) -> None:  # noqa: ANN001
    _show(window, qtbot, size, reset)
    run = write_fake_run(gui_env, steps=5)
    window.state.opener.open_run(str(run))
    qtbot.waitUntil(lambda: window.state.step_data.idle)
    QApplication.processEvents()
    for name, pane in window.step_images.panes.items():
        font = QFont(pane.font())
        font.setPointSize(9)  # the titles' size
        shown = pane.title.text
        assert QFontMetrics(font).horizontalAdvance(shown) <= pane.width() - 8, (name, shown, pane.width())
        if shown != pane.full_title:
            assert shown.endswith("…") and pane.toolTip() == pane.full_title
    assert "VAE decode (none yet)" in {p.full_title for p in window.step_images.panes.values()}

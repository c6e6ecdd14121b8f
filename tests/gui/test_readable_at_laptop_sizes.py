"""Every view readable at 1280×720 and 1366×768, with the default layout and after Reset layout: the verdict badge
is never clipped (its whole text fits inside it), the image panes' titles are cut with '…' to the pane's width with
the whole title in the tooltip, never clipped mid-glyph."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QApplication

from ghostviewer.gui.app_settings import AppSettings
from tests.gui.fake_runs import write_fake_run

SIZES = [(1280, 720), (1366, 768)]


@pytest.fixture(scope="module")
def fake_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Written once, only read: a killed 93-step run and a finished 5-step one."""
    folder = tmp_path_factory.mktemp("laptop-sizes-runs")
    return {"killed": write_fake_run(folder, steps=93, finish=None, run_id="20261201-100000-kkkkkk"),
            "done": write_fake_run(folder, steps=5, run_id="20261201-100001-dddddd")}


@pytest.fixture(scope="module", params=[(size, reset) for reset in (False, True) for size in SIZES],
                ids=lambda p: f"{p[0][0]}x{p[0][1]}-{'reset' if p[1] else 'default'}")
def shown(request: pytest.FixtureRequest, qapp, tmp_path_factory: pytest.TempPathFactory,  # noqa: ANN001
          fake_runs: dict[str, Path]) -> Iterator:
    """One new window per size and layout (default, or after Reset layout), shown; both checks open a run in it."""
    from ghostviewer.gui.app import create_window

    window = create_window(AppSettings(tmp_path_factory.mktemp("laptop-sizes") / "settings.ini"), dialogs=False)
    window.state.history.set_runs_dir(fake_runs["done"].parent)
    window.resize(*request.param[0])
    window.show()
    QApplication.processEvents()
    if request.param[1]:
        window.actions.reset_layout.trigger()
        QApplication.processEvents()
    yield window
    window.state.step_data.shutdown()
    window.state.controller.shutdown()
    window.close()
    window.deleteLater()


def _badge_fits(badge) -> bool:  # noqa: ANN001
    font = QFont(badge.font())
    font.setBold(True)
    return badge.width() >= QFontMetrics(font).horizontalAdvance(badge.text()) + 2 * 10


def test_the_verdict_badge_is_never_clipped(shown, qtbot, fake_runs: dict[str, Path]) -> None:  # noqa: ANN001
    window = shown
    qtbot.waitExposed(window)
    window.state.opener.open_run(str(fake_runs["killed"]))  # killed: "incomplete · 93/93"
    qtbot.waitUntil(lambda: window.state.timeline.record is not None
                    and Path(window.state.timeline.record.path) == fake_runs["killed"])
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


def test_pane_titles_are_elided_not_clipped(shown, qtbot, fake_runs: dict[str, Path]) -> None:  # noqa: ANN001
    window = shown
    qtbot.waitExposed(window)
    window.state.opener.open_run(str(fake_runs["done"]))
    qtbot.waitUntil(lambda: Path(window.state.timeline.record.path) == fake_runs["done"])
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

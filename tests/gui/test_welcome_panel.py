"""The welcome tour is a side panel (a dock in the left column), not a dialog over the views it asks the user to
read: at 1280×720 and 1366×768 it covers none of the images, the timeline, the heat map or Blocks."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QDialog, QDockWidget

from ghostviewer.gui.dialogs.welcome import show_welcome


def _rect(widget) -> QRect:  # noqa: ANN001
    return QRect(widget.mapToGlobal(widget.rect().topLeft()), widget.size())


@pytest.mark.parametrize("size", [(1280, 720), (1366, 768)])
def test_the_tour_stands_beside_what_it_points_at(window, qtbot, size) -> None:  # noqa: ANN001
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    panel = show_welcome(window)
    QApplication.processEvents()
    assert not isinstance(panel, QDialog) and isinstance(panel.dock, QDockWidget) and not panel.dock.isFloating()
    assert panel.isVisible() and panel.height() >= 220, panel.height()
    tour = _rect(panel)
    for view in (window.step_images, window.timeline_bar, window.heatmap, window.prompt_panel.run_button):
        assert not tour.intersects(_rect(view)), view
    panel.buttons["heatmap"].click()
    QApplication.processEvents()
    assert window.heatmap.isVisible() and panel.isVisible(), "raising what it points at leaves the tour open"
    panel.close()
    assert not panel.dock.isVisible()
    assert show_welcome(window) is panel and panel.dock.isVisible()  # Help ▸ Welcome brings it back


def test_no_tab_bar_of_the_tour_is_left_after_it_closes(window, qtbot) -> None:  # noqa: ANN001
    from PySide6.QtWidgets import QTabBar

    window.resize(1366, 768)
    window.show()
    qtbot.waitExposed(window)
    panel = show_welcome(window)
    QApplication.processEvents()
    panel.close()
    window.reset_layout()
    qtbot.wait(50)  # the deferred clean-ups
    QApplication.processEvents()
    stray = [bar for bar in window.findChildren(QTabBar) if bar.isVisible()
             and "Welcome" in {bar.tabText(i) for i in range(bar.count())}]
    assert stray == []

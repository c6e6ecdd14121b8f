"""The window fits common laptop screens: at 1280×720 and 1366×768 the Run button, the slider and the Scheduler and
Ghost choices are on screen; it opens inside the screen; View ▸ Reset layout puts the docks back; a saved layout
of another version is dropped; the timeline keys act only in the timeline, images and plot."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QApplication, QWidget

from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.window_layout import STATE_KEY, hide_stray_tab_bars, save_layout
from tests.gui.fake_runs import MODULES, write_fake_run


def fully_shown(window: QWidget, widget: QWidget) -> bool:
    """Inside the window's rectangle, visible, and not clipped by a scroll area or a neighbour."""
    rect = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
    clip = widget.visibleRegion().boundingRect()
    return widget.isVisible() and window.rect().contains(rect) and clip.size() == widget.size()


def dock(window, title: str):  # noqa: ANN001, ANN201
    return next(d for d in window.docks if d.windowTitle() == title)


@pytest.mark.parametrize("size", [(1280, 720), (1366, 768)])
def test_every_control_is_reachable_on_a_laptop_screen(window, qtbot, size: tuple[int, int]) -> None:  # noqa: ANN001
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    QApplication.processEvents()
    assert window.size().toTuple() == size  # no dock holds the window larger than the screen
    assert window.minimumSizeHint().width() <= 1100 and window.minimumSizeHint().height() <= 620
    panel = window.prompt_panel
    for widget in (panel.run_button, panel.scheduler, panel.fault, panel.steps, window.timeline_bar.slider,
                   window.timeline_bar.badge, window.heatmap.log, window.heatmap.stat):
        assert fully_shown(window, widget), widget
    assert window.timeline_bar.slider.width() >= 100
    assert dock(window, "Heat map").width() >= 400 and dock(window, "Prompt").width() >= 260


def test_no_tab_bar_of_a_former_group_after_the_first_show(window, qtbot) -> None:  # noqa: ANN001
    """The default groups are built one dock at a time; Qt leaves the bars of the smaller groups on screen
    (e.g. "Heat map | Feature maps" over the heat map) unless they are hidden once the layout has settled."""
    window.resize(1366, 768)
    window.show()
    qtbot.waitExposed(window)
    QApplication.processEvents()
    assert hide_stray_tab_bars(window) == 0


def test_reset_layout_puts_every_dock_back(window, qtbot) -> None:  # noqa: ANN001
    window.resize(1366, 768)
    window.show()
    qtbot.waitExposed(window)
    heat, blocks, log = dock(window, "Heat map"), dock(window, "Blocks"), dock(window, "Log")
    heat.setFloating(True)
    blocks.hide()
    window.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, log)
    window.actions.reset_layout.trigger()
    QApplication.processEvents()
    assert not heat.isFloating() and window.dockWidgetArea(heat) == Qt.DockWidgetArea.RightDockWidgetArea
    assert window.dockWidgetArea(log) == Qt.DockWidgetArea.BottomDockWidgetArea
    assert blocks in window.tabifiedDockWidgets(dock(window, "Runs history"))
    assert dock(window, "Sweep gallery") in window.tabifiedDockWidgets(log)
    assert window.size().toTuple() == (1366, 768) and fully_shown(window, window.prompt_panel.run_button)
    assert hide_stray_tab_bars(window) == 0  # no tab bar of a former group left on screen
    assert "Reset layout" in [a.text().replace("&", "") for a in window.menuBar().actions()[2].menu().actions()]


def test_opens_inside_the_screen_and_drops_old_layouts(qtbot, gui_env: Path) -> None:  # noqa: ANN001
    from ghostviewer.gui.app import create_window

    def open_again():  # noqa: ANN202
        window = create_window(AppSettings(), dialogs=False)
        qtbot.addWidget(window)
        return window

    first = open_again()
    first.show()
    qtbot.waitExposed(first)
    first.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock(first, "Heat map"))  # the user's own layout
    first.resize(2600, 1900)  # bigger than the screen it will open on
    first.move(3000, 2000)
    save_layout(first, first.state.settings)
    first.state.controller.shutdown()
    again = open_again()
    screen = QApplication.primaryScreen().availableGeometry()
    assert screen.contains(again.frameGeometry())  # moved and shrunk into the screen
    again.show()
    qtbot.waitExposed(again)
    assert again.dockWidgetArea(dock(again, "Heat map")) == Qt.DockWidgetArea.LeftDockWidgetArea  # restored
    again.actions.reset_layout.trigger()  # the default layout is still known
    assert again.dockWidgetArea(dock(again, "Heat map")) == Qt.DockWidgetArea.RightDockWidgetArea
    again.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock(again, "Heat map"))
    again.state.settings.set_bytes(STATE_KEY, again.saveState(1))  # as an older GhostViewer saved it
    again.state.controller.shutdown()
    old = open_again()
    old.show()
    qtbot.waitExposed(old)
    assert old.dockWidgetArea(dock(old, "Heat map")) == Qt.DockWidgetArea.RightDockWidgetArea  # dropped
    assert dock(old, "Blocks") in old.tabifiedDockWidgets(dock(old, "Runs history"))  # the default, not mangled
    old.state.controller.shutdown()


def test_timeline_keys_act_only_in_the_timeline_images_and_plot(window, gui_env: Path, qtbot) -> None:  # noqa: ANN001
    state = window.state
    state.blocks.set_blocks([{"module": m, "kind": "X", "bypassable": True} for m in MODULES])
    state.opener.open_run(write_fake_run(gui_env, steps=6))
    window.resize(1366, 768)
    window.show()
    qtbot.waitExposed(window)
    dock(window, "Blocks").raise_()
    state.timeline.set_step(2)
    tree = window.block_tree.tree
    tree.setFocus()
    qtbot.waitUntil(tree.hasFocus)
    tree.setCurrentItem(window.block_tree.items["unet"])
    window.block_tree.items["unet"].setExpanded(False)
    for key in (Qt.Key.Key_Right, Qt.Key.Key_End, Qt.Key.Key_Home, Qt.Key.Key_Space, Qt.Key.Key_Left):
        qtbot.keyClick(tree, key)
    assert state.timeline.step == 2 and not state.timeline.playing  # the tree kept its keys
    window.history_panel.tree.setFocus()
    qtbot.keyClick(window.history_panel.tree, Qt.Key.Key_End)
    assert state.timeline.step == 2
    pane = window.step_images.panes["latents"]
    pane.setFocus()
    qtbot.waitUntil(pane.hasFocus)
    qtbot.keyClick(pane, Qt.Key.Key_Right)
    assert state.timeline.step == 3
    qtbot.keyClick(window.timeline_bar.slider, Qt.Key.Key_End)
    assert state.timeline.step == 5
    window.actions.first_step.trigger()  # the View menu entries work from anywhere
    assert state.timeline.step == 0

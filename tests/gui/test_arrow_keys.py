"""The arrow keys scrub the steps wherever the user last clicked a step-shaped view: after a click in the heat map
(they did nothing), and in the Blocks tree, where Left/Right scrub instead of collapsing nodes (Up/Down still walk
the blocks)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from tests.gui.fake_runs import MODULES, write_fake_run


def _open(window, qtbot, gui_env: Path):  # noqa: ANN001, ANN202
    window.resize(1366, 768)
    window.show()
    qtbot.waitExposed(window)
    window.state.opener.open_run(str(write_fake_run(gui_env, steps=6)))
    window.state.timeline.set_step(2)
    QApplication.processEvents()
    return window.state.timeline


def test_arrows_scrub_after_a_click_in_the_heat_map(window, qtbot, gui_env: Path) -> None:  # noqa: ANN001
    timeline = _open(window, qtbot, gui_env)
    view = window.heatmap.plot
    next(d for d in window.docks if d.windowTitle() == "Heat map").raise_()
    QApplication.processEvents()
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.viewport().rect().center())
    QApplication.processEvents()
    step = timeline.step
    QTest.keyClick(QApplication.focusWidget() or view, Qt.Key.Key_Right)
    assert timeline.step == step + 1
    QTest.keyClick(QApplication.focusWidget() or view, Qt.Key.Key_Left)
    assert timeline.step == step


def test_left_right_scrub_in_the_blocks_tree(window, qtbot, gui_env: Path) -> None:  # noqa: ANN001
    timeline = _open(window, qtbot, gui_env)
    next(d for d in window.docks if d.windowTitle() == "Blocks").raise_()
    tree = window.block_tree.tree
    window.state.blocks.set_blocks([{"module": m, "kind": "X", "bypassable": True} for m in MODULES])
    qtbot.waitUntil(lambda: tree.topLevelItemCount() > 0, timeout=5000)
    tree.setFocus()
    tree.setCurrentItem(tree.topLevelItem(0))
    tree.topLevelItem(0).setExpanded(True)
    QApplication.processEvents()
    QTest.keyClick(tree, Qt.Key.Key_Right)
    assert timeline.step == 3 and tree.topLevelItem(0).isExpanded()
    QTest.keyClick(tree, Qt.Key.Key_Left)
    assert timeline.step == 2 and tree.topLevelItem(0).isExpanded(), "Left scrubs, it does not collapse"

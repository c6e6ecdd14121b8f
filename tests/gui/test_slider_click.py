"""A click in the timeline slider's groove jumps to the step under the click (it moved 5 steps, a page)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QStyle, QStyleOptionSlider

from tests.gui.fake_runs import write_fake_run


def test_a_click_in_the_groove_jumps_to_the_click(window, qtbot, gui_env: Path) -> None:  # noqa: ANN001
    window.resize(1366, 768)
    window.show()
    qtbot.waitExposed(window)
    timeline = window.state.timeline
    window.state.opener.open_run(str(write_fake_run(gui_env, steps=40)))
    timeline.set_step(0)
    QApplication.processEvents()
    slider = window.timeline_bar.slider
    option = QStyleOptionSlider()
    slider.initStyleOption(option)
    groove = slider.style().subControlRect(QStyle.ComplexControl.CC_Slider, option,
                                           QStyle.SubControl.SC_SliderGroove, slider)
    x = groove.left() + int(0.75 * groove.width())
    QTest.mouseClick(slider, Qt.MouseButton.LeftButton, pos=QPoint(x, slider.height() // 2))
    QApplication.processEvents()
    assert 25 <= timeline.step <= 33, timeline.step  # about three quarters of 0-39, not 5

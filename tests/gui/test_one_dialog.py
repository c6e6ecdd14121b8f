"""An engine killed mid-sweep is said in ONE dialog with its Restart button, not two stacked boxes hiding it:
a message reported while a box is open is added to that box (and its remedy buttons to its buttons)."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from ghostviewer.gui import messages
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter


def test_messages_while_a_box_is_open_fold_into_it(qtbot) -> None:  # noqa: ANN001
    parent = QWidget()
    qtbot.addWidget(parent)
    parent.show()
    reporter = ErrorReporter(dialogs=True)
    reporter.parent_widget = parent
    restarted: list[bool] = []
    reporter.offer(messages.ENGINE_DIED, "Restart engine", lambda: restarted.append(True))
    reporter.report("The sweep stopped: the engine process ended.")
    reporter.report(messages.ENGINE_DIED.format(reason="killed"))
    QApplication.processEvents()
    boxes = [w for w in QApplication.topLevelWidgets() + parent.findChildren(QMessageBox)
             if isinstance(w, QMessageBox) and w.isVisible()]
    assert len(set(boxes)) == 1, boxes
    box = boxes[0]
    assert "sweep stopped" in box.text() and messages.ENGINE_DIED.format(reason="killed") in box.text()
    restart = next(b for b in box.buttons() if b.text() == "Restart engine")
    restart.click()
    assert restarted == [True]

"""The window runs exactly what it shows: every prompt field is checked as it is typed with the run spec's own
checks; a value that would not run as shown turns Run off, outlines the field and says why under the button, and
Ctrl+Enter queues nothing; an emptied field never runs its previous value."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFocusEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from ghostviewer.gui.app_settings import AppSettings


def _type(widget, text: str, enter: bool = False) -> None:  # noqa: ANN001
    widget.setFocus()
    (widget.selectAll if hasattr(widget, "selectAll") else widget.lineEdit().selectAll)()
    if text:
        QTest.keyClicks(widget, text)
    else:
        QTest.keyClick(widget, Qt.Key.Key_Delete)
    if enter:
        QTest.keyClick(widget, Qt.Key.Key_Return)


# field, typed, the field's text afterwards, words of the refusal
BAD_VALUES = [
    ("steps", "0", "0", "steps must be at least 1, not 0"),
    ("steps", "5000", "5000", "steps must be at most 1000, not 5000"),
    ("guidance", "999", "999", "guidance must be a number from 0 to 100"),
    ("width_box", "100000", "100000", "width must be at most 65536, not 100000"),
    ("height_box", "100", "100", "height must be a positive multiple of 8, not 100"),
    ("steps", "", "", "the steps field is empty"),
    ("seed", "", "", "the seed field is empty"),
]


FIELDS = sorted({field for field, *_ in BAD_VALUES})


def _text(panel, field: str) -> str:  # noqa: ANN001
    box = getattr(panel, field)
    return box.text() if field == "seed" else box.lineEdit().text()


def _new_window(root) -> object:  # noqa: ANN001 - a pytest temporary folder
    from ghostviewer.gui.app import create_window

    window = create_window(AppSettings(root / "settings.ini"), dialogs=False)
    window.state.history.set_runs_dir(root / "runs")
    window.resize(1366, 768)
    window.show()
    return window


def _close(window) -> None:  # noqa: ANN001
    window.state.controller.shutdown()
    window.close()
    window.deleteLater()


@pytest.fixture(scope="module")
def _windows(qapp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list]:  # noqa: ANN001
    held: list = []  # the window the next test gets, if the one before could put it back as new
    yield held
    for window in held:
        _close(window)


@pytest.fixture
def shown_window(_windows: list, qtbot, tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001
    """A shown window as new for each bad value: the one before it when the field it typed into could be put back
    as it was (else a new one), and checked to be one that would run."""
    if not _windows:
        _windows.append(_new_window(tmp_path_factory.mktemp("runs-as-shown")))
    window = _windows[0]
    qtbot.waitExposed(window)
    panel = window.prompt_panel
    before = {field: _text(panel, field) for field in FIELDS}
    locked = panel.lock.isChecked()
    assert panel.run_button.isEnabled() and panel.refusal() == "" and window.state.queue.jobs() == []
    spec = window.state.prompt.take_spec("demo", "auto", "")
    yield window
    for field, text in before.items():
        box = getattr(panel, field)
        if _text(panel, field) == text:
            continue
        if field != "seed" and text == box.specialValueText():  # "pipeline default": the box's minimum
            box.setValue(box.maximum())
            box.setValue(box.minimum())
        else:
            _type(box, text, enter=True)
    panel.lock.setChecked(locked)
    if ({field: _text(panel, field) for field in FIELDS} != before or panel.refusal()
            or window.state.prompt.take_spec("demo", "auto", "") != spec):
        _windows.remove(window)  # not back as it was: not reused
        _close(window)


@pytest.mark.parametrize(("field", "typed", "shown", "words"), BAD_VALUES)
def test_a_bad_value_stays_as_typed_and_the_run_is_refused_in_words(shown_window, field: str, typed: str,  # noqa: ANN001
                                                                    shown: str, words: str) -> None:
    window = shown_window
    panel, c = window.prompt_panel, window.state.controller
    box = getattr(panel, field)
    _type(box, typed)
    text = box.text() if field == "seed" else box.lineEdit().text()
    assert text == shown  # what the field shows is what was typed, never cut to a box's maximum
    assert not panel.run_button.isEnabled()
    assert words in panel.refusal() and words in panel.why.text() and words in panel.run_button.toolTip()
    assert panel.why.isVisible() and panel.why.width() > 100
    assert "c62828" in box.styleSheet()  # the field is outlined in red
    messages: list[str] = []
    c.sigMessage.connect(messages.append)
    window.actions.run.trigger()  # Ctrl+Enter: refused too, in the same words
    assert window.state.queue.jobs() == [] and any(words in m for m in messages)


def test_mending_the_field_turns_run_back_on(window) -> None:  # noqa: ANN001
    panel, model = window.prompt_panel, window.state.prompt
    _type(panel.steps, "0")
    assert not panel.run_button.isEnabled()
    _type(panel.steps, "4")
    assert panel.run_button.isEnabled() and panel.why.text() == "" and panel.steps.styleSheet() == ""
    assert model.take_spec("demo", "auto", "").steps == 4


def test_an_emptied_seed_never_runs_the_previous_seed(window) -> None:  # noqa: ANN001
    panel, model = window.prompt_panel, window.state.prompt
    _type(panel.seed, "42")
    _type(panel.seed, "")
    assert panel.seed.text() == "" and model.refusal()
    assert window.state.controller.queue_run() is None
    panel.lock.setChecked(False)  # unlocked: each run draws its own seed, an empty field is fine
    assert model.refusal() == ""
    job = window.state.controller.queue_run()
    assert job is not None and panel.seed.text() == str(job.settings["seed"])  # the field shows the drawn seed


def test_steps_left_empty_come_back_visibly_on_leaving_the_field(window, qtbot) -> None:  # noqa: ANN001
    window.show()
    panel, model = window.prompt_panel, window.state.prompt
    _type(panel.steps, "12", enter=True)
    _type(panel.steps, "")
    assert model.refusal()
    # leaving the box (a click elsewhere) puts its value back where the user can see it
    QApplication.sendEvent(panel.steps, QFocusEvent(QEvent.Type.FocusOut, Qt.FocusReason.MouseFocusReason))
    qtbot.waitUntil(lambda: panel.steps.lineEdit().text() == "12")
    assert model.refusal() == "" and model.take_spec("demo", "auto", "").steps == 12

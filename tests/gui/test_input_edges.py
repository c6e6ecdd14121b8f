"""What a clumsy or hostile user of the window meets: typed values kept as typed, seeds the engine accepts, dialogs
that close with Esc, drops that say what is wrong, actions offered only when they can work, a started sweep that
shows itself, queued runs that say what they wait for."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMessageBox

from ghostviewer.gui import messages
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter
from ghostviewer.spec.seeds import MAX_SEED
from tests.gui.as_new import as_new_window, as_new_windows
from tests.gui.fake_runs import write_fake_run

WAIT_MS = 20000


def _type(widget, text: str) -> None:  # noqa: ANN001
    widget.setFocus()
    widget.selectAll() if hasattr(widget, "selectAll") else widget.lineEdit().selectAll()
    QTest.keyClicks(widget, text)
    QTest.keyClick(widget, Qt.Key.Key_Return)


_as_new_windows = as_new_windows()
window = as_new_window()  # one window from test to test while it is put back exactly as new (tests/gui/as_new.py)


def test_guidance_keeps_a_typed_fraction(window) -> None:  # noqa: ANN001
    guidance = window.prompt_panel.guidance
    for typed, expected in (("7.5", 7.5), ("0.5", 0.5), ("3.25", 3.25)):
        _type(guidance, typed)
        assert guidance.value() == expected and window.state.prompt.guidance == expected
    assert window.state.prompt.take_settings("demo", "auto", "")["guidance"] == 3.25


def test_guidance_starts_at_the_pipeline_familys_usual(window) -> None:  # noqa: ANN001
    """As `ghostviewer run` without --guidance: the engine fills in 7.5 for SD, 5 for SDXL, 3.5 for Flux."""
    box, model = window.prompt_panel.guidance, window.state.prompt
    assert box.text() == "pipeline default" and model.take_settings("demo", "auto", "")["guidance"] is None
    assert window.state.opener.sweeps._settings()["guidance"] is None
    _type(box, "7.5")
    assert model.take_settings("demo", "auto", "")["guidance"] == 7.5
    box.setValue(box.minimum())  # stepping below 0 comes back to the default
    assert model.take_settings("demo", "auto", "")["guidance"] is None


def test_the_seed_field_takes_only_seeds_the_engine_accepts(window) -> None:  # noqa: ANN001
    seed = window.prompt_panel.seed
    _type(seed, str(MAX_SEED))
    assert window.state.prompt.seed == MAX_SEED
    _type(seed, str(MAX_SEED + 1))  # the last keystroke would pass the largest seed: refused
    assert int(seed.text()) <= MAX_SEED and window.state.prompt.seed <= MAX_SEED
    assert seed.validator().validate("-1", 0)[0].name == "Invalid"
    assert seed.validator().validate("9" * 20, 0)[0].name == "Invalid"
    assert str(MAX_SEED) in seed.toolTip()


def test_a_message_box_with_a_remedy_closes_with_esc_and_is_not_stacked(qtbot) -> None:  # noqa: ANN001
    reporter = ErrorReporter(dialogs=True)
    restarted: list[bool] = []
    reporter.offer(messages.ENGINE_DIED, "Restart engine", lambda: restarted.append(True))
    message = messages.ENGINE_DIED.format(reason="was killed (SIGKILL)")
    reporter.report(message)
    reporter.report(message)  # the engine died again before the box was read: still one box
    boxes = [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]
    assert len(boxes) == 1
    QTest.keyClick(boxes[0], Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not boxes[0].isVisible(), timeout=2000)
    assert restarted == []  # Esc is OK, not the remedy


def test_drops_say_what_is_wrong_with_the_path(window, tmp_path: Path) -> None:  # noqa: ANN001
    opener, reporter = window.state.opener, window.state.reporter
    opener.open_path(tmp_path / "gone.txt")
    assert "is not there" in reporter.last_message
    loop = tmp_path / "loop.txt"
    loop.symlink_to(loop)
    opener.open_path(loop)
    assert "is not a file or a folder" in reporter.last_message
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    opener.open_path(fifo)
    assert "is not a file or a folder" in reporter.last_message
    odd = tmp_path / "notes.docx"
    odd.write_bytes(b"x")
    opener.open_path(odd)
    assert "does not know what to do" in reporter.last_message


def test_with_no_run_shown_replay_is_off_and_the_anomaly_jump_says_so(window) -> None:  # noqa: ANN001
    actions = window.actions
    assert window.state.timeline.record is None
    assert not any(a.isEnabled() for a in (actions.replay, actions.replay_5, actions.replay_20))
    messages_seen: list[str] = []
    window.state.controller.sigMessage.connect(messages_seen.append)
    assert window.state.controller.jump_to_first_anomaly() is False
    assert messages_seen == [messages.NO_RUN_SHOWN]
    window.state.opener.open_run(write_fake_run(window.state.history.runs_dir, steps=2, run_id="shown"))
    assert actions.replay.isEnabled() and actions.replay_5.isEnabled()


def test_bisecting_a_run_still_being_written_says_it_is_running(window, gui_env: Path) -> None:  # noqa: ANN001
    answers: list[bool] = []

    def bisect_mid_run(run_dir: Path, step: int) -> None:
        if step == 1:
            answers.append(window.state.controller.bisect(str(run_dir)))

    write_fake_run(gui_env, steps=3, run_id="live", nan_at=0, on_step=bisect_mid_run)
    assert answers == [False]
    assert window.state.reporter.last_message == messages.BISECT_NOT_ENDED.format(run_id="live")


def test_the_prompt_panel_scrolls_sideways_in_a_narrow_dock(window, qtbot) -> None:  # noqa: ANN001
    window.resize(1024, 600)  # below the documented minimum: what does not fit must still be reachable
    window.show()
    scroll = window.prompt_panel.scroll
    qtbot.waitExposed(window)
    hidden = scroll.widget().minimumSizeHint().width() - scroll.viewport().width()
    bar = scroll.horizontalScrollBar()
    assert hidden > 0 and bar.isVisible() and bar.maximum() >= hidden


def test_an_empty_prompt_list_is_refused_before_the_engine_sees_it(window, tmp_path: Path) -> None:  # noqa: ANN001
    empty = tmp_path / "empty.txt"
    empty.write_text("# only a comment\n\n", encoding="utf-8")
    sweeps = window.state.opener.sweeps
    assert sweeps.start(empty, seeds="0-3") is False and sweeps.state == "idle"
    assert "holds no prompts" in window.state.reporter.last_message


def test_a_dropped_list_brings_the_gallery_forward_and_says_so(fake_window, qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    win = fake_window
    log_dock = next(d for d in win.docks if d.windowTitle() == "Log")
    log_dock.raise_()
    listing = tmp_path / "three.txt"
    listing.write_text("a red circle\na blue square\na green star\n", encoding="utf-8")
    win.state.opener.open_path(listing)
    gallery = next(d for d in win.docks if d.windowTitle() == "Sweep gallery")
    qtbot.waitUntil(lambda: gallery.widget().isVisible() and not gallery.visibleRegion().isEmpty(), timeout=5000)
    assert "Sweep of three.txt" in win.statusBar().currentMessage()


def test_a_queued_run_after_the_engine_died_waits_for_a_restart(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    state.prompt.update(steps=300)
    running = state.controller.queue_run()
    qtbot.waitUntil(lambda: running.step >= 1, timeout=WAIT_MS)
    queued = state.controller.queue_run()
    with qtbot.waitSignal(state.engine.sigEngineDied, timeout=WAIT_MS):
        os.kill(state.engine.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: running.finished, timeout=WAIT_MS)
    assert queued.status == "queued" and queued.waiting == messages.JOB_WAITING_ENGINE
    with qtbot.waitSignal(state.engine.sigReady, timeout=WAIT_MS):
        fake_window.actions.restart_engine.trigger()
    qtbot.waitUntil(lambda: queued.waiting != messages.JOB_WAITING_ENGINE, timeout=WAIT_MS)

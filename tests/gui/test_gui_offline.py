"""The window on recorded runs alone: no engine process, no torch."""

from __future__ import annotations

from pathlib import Path

from tests.gui.as_new import as_new_window, as_new_windows
from tests.gui.fake_runs import write_fake_run

_as_new_windows = as_new_windows()
window = as_new_window()  # one window from test to test while it is put back exactly as new (tests/gui/as_new.py)


def test_history_lists_runs_and_reopens_one(window, gui_env: Path, qtbot) -> None:  # noqa: ANN001
    done = write_fake_run(gui_env, steps=5, seed=1, run_id="a-done")
    killed = write_fake_run(gui_env, steps=3, seed=2, finish=None, run_id="b-killed")
    state = window.state
    state.history.refresh()
    states = {Path(e.path).name: e.state(None) for e in state.history.entries}
    assert states == {"a-done": "ok", "b-killed": "incomplete"}
    window.history_panel.select(str(killed))
    assert state.timeline.run_dir == str(killed)
    assert state.timeline.count == 3
    assert window.timeline_bar.badge.kind == "incomplete"
    window.history_panel.select(str(done))
    assert state.timeline.count == 5 and window.timeline_bar.badge.kind == "ok"
    qtbot.waitUntil(lambda: window.step_images.items["final image"].image is not None, timeout=5000)  # off-thread


def test_scrub_with_slider_and_keys(window, gui_env: Path, qtbot) -> None:  # noqa: ANN001
    run = write_fake_run(gui_env, steps=6)
    state = window.state
    assert state.opener.open_run(run)
    assert state.timeline.step == 5
    window.timeline_bar.slider.setValue(2)
    assert state.timeline.step == 2
    assert "step 2 of 0–5" in window.timeline_bar.step_label.full_text
    window.actions.step_forward.trigger()
    assert state.timeline.step == 3 and window.timeline_bar.slider.value() == 3
    window.actions.step_back.trigger()
    window.actions.step_back.trigger()
    assert state.timeline.step == 1
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)  # the step is read off the GUI thread
    latents = window.step_images.items["latents"].image
    assert latents is not None and latents.shape[-1] == 4
    assert abs(window.stat_plot.line.value() - 1) < 1e-9
    assert set(window.stat_plot._curves) == set(state.selection.modules) != set()
    with qtbot.waitSignal(state.timeline.playingChanged, timeout=2000):
        window.actions.play.trigger()
    qtbot.waitUntil(lambda: not state.timeline.playing, timeout=5000)
    assert state.timeline.step == 5


def test_replay_check_and_prompt_list(window, gui_env: Path, tmp_path: Path) -> None:
    from ghostviewer.analysis.compare import compare_runs

    a = write_fake_run(gui_env, seed=3, run_id="x1")
    b = write_fake_run(gui_env, seed=3, run_id="x2")
    c = write_fake_run(gui_env, seed=3, run_id="x3", nan_at=2)
    assert compare_runs(a, b)["reproduced"] is True
    diverged = compare_runs(a, c)
    assert diverged["reproduced"] is False and diverged["first_divergence"]["step"] == 2
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# shapes\na red circle\n\na blue square\n", encoding="utf-8")
    jobs = window.state.opener.queue_prompt_list(prompts)
    assert [j.settings["prompt"] for j in jobs] == ["a red circle", "a blue square"]
    assert all(j.status == "queued" for j in jobs)  # no engine: they wait
    window.state.controller.cancel(jobs[0].id)
    assert jobs[0].status == "cancelled"


def test_unknown_drop_is_a_message_not_a_traceback(window, tmp_path: Path) -> None:
    odd = tmp_path / "notes.docx"
    odd.write_bytes(b"x")
    window.state.opener.open_path(odd)
    assert "does not know what to do" in (window.state.reporter.last_message or "")


def test_shortcuts_respect_text_fields(window, gui_env: Path, qtbot) -> None:  # noqa: ANN001
    from PySide6.QtCore import Qt

    state = window.state
    state.opener.open_run(write_fake_run(gui_env, steps=4))
    window.show()
    qtbot.waitExposed(window)
    state.timeline.set_step(1)
    prompt = window.prompt_panel.prompt
    prompt.setFocus()
    qtbot.waitUntil(prompt.hasFocus)
    qtbot.keyClick(prompt, Qt.Key.Key_Right)  # moves the text cursor, not the timeline
    qtbot.keyClick(prompt, Qt.Key.Key_Space)
    assert state.timeline.step == 1 and not state.timeline.playing
    qtbot.keyClick(prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert len(state.queue.jobs()) == 1  # Ctrl+Enter queued a run (it waits: no engine here)
    window.stat_plot.plot.setFocus()
    qtbot.waitUntil(window.stat_plot.plot.hasFocus)
    qtbot.keyClick(window.stat_plot.plot, Qt.Key.Key_Right)
    assert state.timeline.step == 2


def test_settings_are_remembered(qtbot, gui_env: Path) -> None:  # noqa: ANN001
    from ghostviewer.gui.app import create_window
    from ghostviewer.gui.app_settings import SETTINGS_VERSION, AppSettings

    first = create_window(AppSettings(), dialogs=False)
    qtbot.addWidget(first)
    first.state.prompt.update(prompt="a cyan cross", seed=99, steps=12)
    first.state.pipeline.set_device("cpu")
    first.close()
    second = create_window(AppSettings(), dialogs=False)
    qtbot.addWidget(second)
    assert (second.state.prompt.prompt, second.state.prompt.seed, second.state.prompt.steps) == ("a cyan cross", 99, 12)
    assert second.state.pipeline.device == "cpu"
    assert second.prompt_panel.steps.value() == 12
    assert int(AppSettings().qsettings.value("version")) == SETTINGS_VERSION


def test_drop_a_prompt_list_and_a_pipeline_folder(window, tmp_path: Path) -> None:
    from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
    from PySide6.QtGui import QDropEvent

    prompts = tmp_path / "list.txt"
    prompts.write_text("a red circle\na blue star\n", encoding="utf-8")
    folder = tmp_path / "my-pipeline"
    folder.mkdir()
    (folder / "model_index.json").write_text("{}", encoding="utf-8")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(prompts)), QUrl.fromLocalFile(str(folder))])
    event = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)
    state = window.state
    assert state.opener.sweeps.state == "waiting" and state.queue.jobs() == []  # a dropped list is swept
    assert state.pipeline.source == str(folder)
    assert str(folder) not in state.pipeline.recent  # Recent holds only pipelines that loaded (none here)

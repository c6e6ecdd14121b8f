"""Two windows open at once on one settings file: each keeps what the other changed (the last to quit used to
overwrite every key with what it had loaded), recent pipelines are merged."""

from __future__ import annotations

from pathlib import Path

from ghostviewer.gui.app_settings import AppSettings


def test_the_last_window_to_quit_keeps_the_others_changes(qtbot, gui_env: Path, tmp_path: Path) -> None:  # noqa: ANN001
    from ghostviewer.gui.app import create_window

    path = tmp_path / "shared.ini"
    first = create_window(AppSettings(path), dialogs=False)
    second = create_window(AppSettings(path), dialogs=False)
    for window in (first, second):
        qtbot.addWidget(window)
    first.state.pipeline.device = "cpu"
    first.state.pipeline.recent = ["/models/first", "demo"]
    second.state.selection.set_stat("std")
    second.state.pipeline.recent = ["/models/second", "demo"]
    first.state.save()
    second.state.save()  # the last to quit
    for window in (first, second):
        window.state.controller.shutdown()
    settings = AppSettings(path)
    assert settings.get_json("device", "") == "cpu", "the first window's device survives the second's quit"
    assert settings.get_json("plot_stat", "") == "std"
    recent = settings.get_json("recent_pipelines", [])
    assert recent[0] == "/models/second" and "/models/first" in recent and recent.count("demo") == 1

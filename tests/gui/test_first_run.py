"""A first run that teaches the hunt, and no ghost, bypass or capture that the user does not see: the welcome,
the Ghost choice forgotten between launches, the Run button, header and history saying what a run changes, About
with versions and shortcuts, only devices that exist, and Restart engine offered when the engine dies."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMessageBox

from ghostviewer.gui import messages
from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.app_state import build_state
from ghostviewer.gui.dialogs.about_dialog import about_text
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter
from ghostviewer.gui.dialogs.welcome import TOUR_GHOST, welcome_once
from tests.gui.fake_runs import MODULES, write_fake_run


def test_the_ghost_is_never_remembered(gui_env: Path, tmp_path: Path) -> None:
    state = build_state(AppSettings(), dialogs=False)
    state.prompt.update(prompt="a blue star", seed=5, fault="nan-latents")
    state.save()
    again = build_state(AppSettings(), dialogs=False)
    assert (again.prompt.prompt, again.prompt.seed, again.prompt.fault) == ("a blue star", 5, "")
    old = tmp_path / "old.ini"  # written by GhostViewer 1 (settings version 1), which remembered it
    raw = QSettings(str(old), QSettings.Format.IniFormat)
    raw.setValue("version", 1)
    raw.setValue("prompt", '{"prompt": "x", "fault": "nan-latents"}')
    raw.setValue("window/state", b"old layout")
    raw.sync()
    migrated = build_state(AppSettings(old), dialogs=False)
    assert migrated.prompt.prompt == "x" and migrated.prompt.fault == ""
    assert migrated.settings.get_bytes("window/state") is None


def test_the_run_button_header_and_history_say_what_a_run_changes(window, gui_env: Path) -> None:  # noqa: ANN001
    state, button = window.state, window.prompt_panel.run_button
    assert button.text() == "Run  (Ctrl+Enter)"
    state.prompt.update(fault="nan-latents")
    assert button.text() == "Run (ghost: nan-latents)"
    state.blocks.set_blocks([{"module": m, "kind": "X", "bypassable": True} for m in MODULES])
    state.blocks.set_bypass("unet.mid_block", True)
    state.blocks.set_capture("unet.conv_in", True)
    assert button.text() == "Run (ghost: nan-latents, 1 bypass, 1 capture)"
    assert "ghost" in button.toolTip()
    settings = {"prompt": "a red circle", "seed": 3, "steps": 4, "guidance": 7.5, "faults": ["nan-latents"],
                "bypass": ["unet.mid_block"], "capture": [], "source": "demo"}
    run = write_fake_run(gui_env, steps=4, settings=settings, nan_at=2)
    state.opener.open_run(run)
    header = window.run_header.text()
    assert "ghost: nan-latents · 1 bypass" in header
    assert "first anomaly: nan in unet.mid_block (denoise step 2)" in header
    state.history.refresh()
    row = window.history_panel.tree.topLevelItem(0)
    assert row.text(4) == "[ghost: nan-latents · 1 bypass] a red circle"
    assert row.text(5) == "nan in unet.mid_block (denoise step 2)"
    assert len(row.text(0)) == len("11-30 07:43") and row.text(0)[2] == "-"  # the date and the time
    assert not row.icon(0).isNull()  # a thumbnail of the final image
    state.blocks.clear_ticks()
    state.prompt.update(fault="")
    assert button.text() == "Run  (Ctrl+Enter)"


def test_the_welcome_shows_once_and_sets_up_the_tour(window) -> None:  # noqa: ANN001
    dialog = welcome_once(window)
    assert dialog is not None and not dialog.dock.isHidden()  # a dock of the window (shown with it)
    text = dialog.text.toPlainText()
    for words in ("Ctrl+J", "Blocks", "heat map", "Replay seed", "Export bug report"):
        assert words in text
    dialog.buttons["setup"].click()
    state = window.state
    assert state.prompt.fault == TOUR_GHOST and state.prompt.prompt == "red circle" and state.pipeline.source == "demo"
    assert window.prompt_panel.run_button.text() == f"Run (ghost: {TOUR_GHOST})"
    dialog.close()
    assert welcome_once(window) is None  # once; Help ▸ Welcome afterwards
    assert any(a is window.actions.welcome for a in window.menuBar().actions()[-1].menu().actions())


def test_about_lists_versions_and_shortcuts(window) -> None:  # noqa: ANN001
    state = window.state
    assert "torch (engine): engine not ready" in about_text(state, window.actions)
    state.engine.info = {"torch": "2.13.0+cpu", "devices": ["cpu"]}
    text = about_text(state, window.actions)
    for words in ("GhostViewer:", "Python:", "torch (engine): 2.13.0+cpu", "diffusers:", "Qt:", "Engine device:",
                  "Ctrl+J", "Space  Play / pause (timeline and images)"):
        assert words in text


def test_device_offers_only_devices_that_exist(window) -> None:  # noqa: ANN001
    state, combo = window.state, window.pipeline_panel.device
    state.pipeline.set_device("cuda")  # remembered from a machine that had one
    state.engine.sigReady.emit({"devices": ["cpu"]})
    assert [combo.itemText(i) for i in range(combo.count())] == ["auto", "cpu"]
    assert state.pipeline.device == "auto"


def test_a_dead_engine_offers_restart(qtbot) -> None:  # noqa: ANN001
    reporter = ErrorReporter(dialogs=True)
    restarted = []
    reporter.offer(messages.ENGINE_DIED, "Restart engine", lambda: restarted.append(True))
    reporter.report(messages.ENGINE_DIED.format(reason="killed by SIGKILL"))
    box = reporter._open[-1]
    qtbot.addWidget(box)
    button = next(b for b in box.buttons() if b.text() == "Restart engine")
    assert box.defaultButton() is button and isinstance(box, QMessageBox)
    button.click()
    assert restarted == [True]
    reporter.report(messages.RUN_FAILED.format(message="x"))  # no remedy for that one
    assert [b.text() for b in reporter._open[-1].buttons()] == ["OK"]
    qtbot.addWidget(reporter._open[-1])

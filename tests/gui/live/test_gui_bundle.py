"""Bug-report bundles in the window: a dropped or given .zip opens its first run; File ▸ Export bug report…, also
with the first bad module's inputs (the real engine re-runs the run and writes the bundle)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QMenu

from ghostviewer.record import RunRecord
from ghostviewer.record.bundle import export_bundle, inspect_bundle
from tests.gui.fake_runs import write_fake_run
from tests.gui.live_window import RUN_TIMEOUT_MS, needs_demo, run_job


def _drop(window, path: Path) -> None:  # noqa: ANN001
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    event = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)


def test_dropping_a_bundle_shows_its_first_run(window, gui_env: Path, tmp_path: Path, qtbot) -> None:  # noqa: ANN001
    elsewhere = tmp_path / "colleague"
    first = write_fake_run(elsewhere, steps=4, run_id="first", nan_at=2)
    second = write_fake_run(elsewhere, steps=2, run_id="second")
    bundle = Path(export_bundle([first, second], tmp_path / "report.zip")["bundle"])
    state = window.state
    with qtbot.waitSignal(state.controller.sigMessage, timeout=5000,
                          check_params_cb=lambda text: text.startswith("Opened the bug report")) as blocker:
        _drop(window, bundle)
    assert "2 run(s)" in blocker.args[0] and "first" in blocker.args[0]
    shown = Path(state.timeline.run_dir)
    assert shown.name == "first" and shown.is_relative_to(gui_env / "bundles")
    assert state.timeline.count == 4 and window.timeline_bar.badge.kind == "bad"
    assert RunRecord(shown).steps() == RunRecord(first).steps()
    qtbot.waitUntil(lambda: window.step_images.items["final image"].image is not None, timeout=5000)
    assert state.reporter.last_message is None


def test_a_bad_bundle_is_one_line_not_a_crash(window, gui_env: Path, tmp_path: Path) -> None:  # noqa: ANN001
    bundle = tmp_path / "evil.zip"
    with zipfile.ZipFile(bundle, "w") as zf:
        zf.writestr("../evil.txt", "x")
    window.state.opener.open_path(bundle)
    message = window.state.reporter.last_message or ""
    assert message.startswith("Could not open the bug report") and "outside the bundle" in message
    assert "\n" not in message and window.state.timeline.record is None
    assert not (tmp_path / "evil.txt").exists() and not (gui_env.parent / "evil.txt").exists()


def test_export_bug_report_action(window, gui_env: Path, tmp_path: Path) -> None:  # noqa: ANN001
    from ghostviewer.gui.dialogs.bundle_export_dialog import BundleExportDialog

    window.actions.export_bundle.trigger()  # no run shown: a message, no dialog
    assert window.findChild(BundleExportDialog) is None
    run = write_fake_run(gui_env, steps=3, run_id="shown", capture=("unet.mid_block",))
    assert window.state.opener.open_run(run)
    window.actions.export_bundle.trigger()
    dialog = window.findChild(BundleExportDialog)
    assert dialog is not None and "about" in dialog.estimate.text()
    full = dialog.update_estimate()
    dialog.tensors.setChecked(False)
    assert dialog.update_estimate() < full
    dialog.path.setText(str(tmp_path / "out.zip"))
    assert dialog.save()
    info = inspect_bundle(tmp_path / "out.zip")
    assert info["runs"][0]["run_id"] == "shown" and info["manifest"]["options"]["include_tensors"] is False
    assert "Bug report saved" in window.statusBar().currentMessage()


@needs_demo
def test_export_with_the_first_bad_modules_inputs(live_window, qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    from ghostviewer.gui.dialogs.bundle_export_dialog import BundleExportDialog

    live = live_window  # the live folder's window and engine (conftest.py)
    state = live.state
    job = run_job(qtbot, live, prompt="red circle", seed=0, seed_locked=True, steps=2,
                  fault="short-prompt-attention")
    assert job.status == "done", job.error
    assert state.timeline.run_dir == job.run_dir and state.timeline.record.first_anomaly is not None
    live.actions.export_bundle.trigger()
    dialog = live.findChild(BundleExportDialog)
    assert dialog is not None and Path(dialog.run_dir).name == Path(job.run_dir).name
    dialog.tensors.setChecked(False)
    dialog.inputs.setChecked(True)
    assert "first bad module's inputs" in dialog.estimate.text()
    out = tmp_path / "with-inputs.zip"
    dialog.path.setText(str(out))
    with qtbot.waitSignal(state.engine.sigEvent, timeout=RUN_TIMEOUT_MS,
                          check_params_cb=lambda event: event.get("event") in ("exported", "export_failed")) as got:
        assert dialog.save()  # the engine writes it: the dialog closes at once
    event = got.args[0]
    assert event["event"] == "exported", event
    run_id = Path(job.run_dir).name
    folder = f"runs/{run_id}/isolate"
    assert event["bundle"] == str(out) and event["runs"][0]["isolate"]["repro"] == f"{folder}/repro.py"
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
    assert {f"{folder}/repro.py", f"{folder}/inputs.safetensors"} <= names
    message = live.statusBar().currentMessage()
    assert message.startswith("Bug report saved with the inputs of unet.down_blocks.1.attentions.0"), message
    assert state.reporter.last_message is None


def test_file_menu_opens_a_bug_report_and_a_bad_one_is_a_dialog(window, gui_env: Path, tmp_path: Path,  # noqa: ANN001
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QFileDialog

    menu_texts = [a.text() for m in window.menuBar().findChildren(QMenu) for a in m.actions()]
    assert "Open &bug report (.zip)…" in menu_texts
    broken = tmp_path / "not-a-zip.zip"
    broken.write_bytes(b"this is no zip file")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *_a, **_k: (str(broken), "Bug reports (*.zip)"))
    window.actions.open_bundle.trigger()
    reporter = window.state.reporter
    assert reporter.last_message and reporter.last_message.startswith("Could not open the bug report")
    assert reporter.last_message not in reporter.notes, "said in a dialog, not only in the status bar"
    assert window.state.timeline.record is None

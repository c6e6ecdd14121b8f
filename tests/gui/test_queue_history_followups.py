"""Follow-ups of the job scheduler and the history: queue rows say what each job is (replay k/N, seed, ghost,
dtype, bypasses and captures; never "step None"); a history run's context menu compares, replays, bisects and
exports, and lists the runs of opened bug reports; a bug report's run replays only on its own weights (the
engine's `loaded` event carries them) and says which component differs; a bisection or sweep says the engine is
busy (an export too) and queued runs wait for it visibly."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTreeWidgetItem

from ghostviewer.gui.models.queue_model import QueueModel
from ghostviewer.gui.widgets.queue_panel import QueuePanel
from ghostviewer.record.bundle import export_bundle
from tests.gui.fake_runs import write_fake_run
from tests.gui.handover import hand_over, open_fake_window
from tests.gui.live_window import needs_demo

WAIT_MS = 20_000


def _menu_actions(panel, path: str) -> dict[str, Any]:  # noqa: ANN001 - the history panel
    item = next(i for i in panel._items() if i.data(0, Qt.ItemDataRole.UserRole) == path)
    return {a.text(): a for a in panel.context_menu(item).actions() if a.text()}


def _row(panel, path: str) -> QTreeWidgetItem:  # noqa: ANN001
    return next(i for i in panel._items() if i.data(0, Qt.ItemDataRole.UserRole) == path)


# -- 1. queue rows ----------------------------------------------------------------------------------------------
def test_queue_rows_say_replay_k_of_n_seed_ghost_dtype_and_counts(qtbot, window, gui_env: Path) -> None:  # noqa: ANN001
    model = QueueModel()
    panel = QueuePanel(model)
    qtbot.addWidget(panel)
    settings = {"prompt": "a red circle", "seed": 7, "steps": 4, "dtype": "float16", "faults": ["nan-latents"],
                "bypass": ["unet.mid_block", "unet.up_blocks.0"], "capture": ["unet.conv_in"], "source": "demo"}
    job = model.add(settings, replay_of="/runs/original")
    model.update(job.id, extra={"label": "replay 2/5"})
    text, tip = panel._items[job.id].text(0), panel._items[job.id].toolTip(0)
    assert text.startswith("replay 2/5 · seed 7 · fp16 · ghost: nan-latents · 2 bypasses · 1 capture · ")
    assert text.endswith("a red circle")
    for words in ("replay 2/5 of /runs/original", "dtype float16", "ghost: nan-latents",
                  "bypass (2): unet.mid_block, unet.up_blocks.0", "capture (1): unet.conv_in"):
        assert words in tip
    model.update(job.id, status="cancelled", ended_by="user",
                 first_anomaly={"kind": "nan", "phase": "decode", "step": None, "module": "vae.decoder"})
    tip = panel._items[job.id].toolTip(1)
    assert "first anomaly: nan at decode in vae.decoder" in tip and "None" not in tip
    plain = model.add({"prompt": "p", "seed": 3, "steps": 2})
    assert panel._items[plain.id].text(0) == "seed 3 · p" and "no ghost" in panel._items[plain.id].toolTip(0)
    # replays queued from the window carry their k/N label into the title
    run = write_fake_run(gui_env, steps=2, seed=5, run_id="original")
    first = window.state.controller.replay(str(run), times=3)
    titles = [window.queue_panel._items[j.id].text(0) for j in window.state.queue.jobs()]
    assert first is not None and [t.split(" · ")[:2] for t in titles] == [
        [f"replay {k}/3", "seed 5"] for k in (1, 2, 3)]


# -- 2. the history's context menu and bundle rows -----------------------------------------------------------------
def test_history_menu_compares_replays_bisects_exports_and_lists_bundles(window, gui_env: Path, tmp_path: Path,
                                                                        qtbot) -> None:  # noqa: ANN001
    from ghostviewer.gui.dialogs.bundle_export_dialog import BundleExportDialog

    state, panel = window.state, window.history_panel
    good = str(write_fake_run(gui_env, steps=3, seed=1, run_id="good"))
    bad = str(write_fake_run(gui_env, steps=3, seed=2, run_id="bad", nan_at=1))
    state.history.refresh()
    actions = _menu_actions(panel, bad)
    assert list(actions) == ["Open", "Compare with…", "Replay", "Replay ×5", "Bisect", "Export bug report…"]
    # Compare with…: the next run clicked is B, and A is the run whose menu was used
    actions["Compare with…"].trigger()
    assert window.statusBar().currentMessage().startswith("Compare bad with…")
    with qtbot.waitSignal(state.controller.compare.opened, timeout=5000):
        panel.tree.setCurrentItem(_row(panel, good))
    assert Path(state.timeline.run_dir).name == "bad"  # A is shown, B beside it (the click did not open B)
    assert Path(state.controller.compare.timeline_b.run_dir).name == "good" and panel.compare_from is None
    # Replay, Replay ×5: queued with the recorded settings (the engine is not started: they wait)
    _menu_actions(panel, good)["Replay"].trigger()
    _menu_actions(panel, good)["Replay ×5"].trigger()
    jobs = state.queue.jobs()
    assert len(jobs) == 6 and all(Path(j.replay_of).name == "good" for j in jobs)
    assert [j.label for j in jobs] == ["replay"] + [f"replay {k}/5" for k in range(1, 6)]
    # Bisect: the bisection of that run waits for the engine
    _menu_actions(panel, bad)["Bisect"].trigger()
    assert state.controller.bisects.state == "waiting" and Path(state.controller.bisects.run_dir).name == "bad"
    # Export bug report…: the dialog, for that run
    _menu_actions(panel, good)["Export bug report…"].trigger()
    dialog = window.findChild(BundleExportDialog)
    assert dialog is not None and Path(dialog.run_dir).name == "good"
    dialog.reject()
    # a bug report opened in the window: its runs are rows, tagged with the bundle's name
    colleague = write_fake_run(tmp_path / "colleague", steps=2, seed=9, run_id="theirs")
    bundle = export_bundle([colleague], tmp_path / "report-42.zip")["bundle"]
    (opened,) = state.opener.open_bundle(bundle)
    row = _row(panel, str(opened))
    assert row.text(4).startswith("[bundle report-42] ") and "from the bug report report-42" in row.toolTip(4)
    assert state.history.entry(str(opened)).bundle == "report-42" and len(state.history.entries) == 3
    panel.filter.setText("bundle")
    assert [i.isHidden() for i in panel._items()].count(False) == 1
    # its Replay is off, with the reason (a fake run records no weight hashes)
    replay = _menu_actions(panel, str(opened))["Replay"]
    assert not replay.isEnabled() and "records no weight hashes" in replay.toolTip()


# -- 3. a bug report's run replays only on its own weights ---------------------------------------------------------
@pytest.fixture(scope="module")
def demo_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A bug report of a real 2-step demo run, and the real engine's `loaded` event for the demo pipeline."""
    from ghostviewer import api
    from ghostviewer.engine.server import Emitter, EngineSession

    folder = tmp_path_factory.mktemp("demo-bundle")
    run = api.run("demo", "a red circle on a blue background", seed=3, steps=2, runs_dir=folder / "runs",
                  device="cpu")
    bundle = Path(export_bundle([run["run_dir"]], folder / "demo-report.zip")["bundle"])
    out = io.StringIO()
    EngineSession(Emitter(out)).handle({"cmd": "load", "id": 1, "source": "demo", "device": "cpu"})
    (loaded,) = [e for e in map(json.loads, out.getvalue().splitlines()) if e["event"] == "loaded"]
    return bundle, loaded


@needs_demo
def test_a_bundle_run_replays_only_on_its_recorded_weights(window, demo_bundle) -> None:  # noqa: ANN001
    bundle, loaded = demo_bundle
    state, c, bar = window.state, window.state.controller, window.timeline_bar
    assert set(loaded["weight_hashes"]) >= {"unet", "vae", "text_encoder"}  # the engine says what it loaded
    (run,) = state.opener.open_bundle(bundle)
    assert Path(state.timeline.run_dir) == run
    # no pipeline loaded yet: Replay is off and says what to load
    assert not bar.replay.isEnabled() and not window.actions.replay.isEnabled()
    assert "load the pipeline it was made with (demo)" in bar.replay.toolTip()
    # another pipeline's weights: off, naming the component that differs
    state.pipeline.set_status("loaded", info={**loaded, "weight_hashes": {**loaded["weight_hashes"],
                                                                        "unet": "0123456789abcdef"}})
    assert not bar.replay.isEnabled()
    assert "unet differs (01234567 here" in bar.replay.toolTip() and "vae" not in bar.replay.toolTip()
    assert "unet differs" in window.statusBar().currentMessage()
    assert c.replay() is None and "unet differs" in state.reporter.last_message and state.queue.jobs() == []
    # the loaded event of the same pipeline: on, and the replay runs on the loaded pipeline
    state.pipeline.set_status("loaded", info=loaded)
    assert bar.replay.isEnabled() and window.actions.replay_5.isEnabled()
    assert "weights match" in bar.replay.toolTip() and c.replay_blocker(str(run)) == ""
    job = c.replay()
    assert job is not None and job.settings["source"] == state.pipeline.source and job.replay_of == str(run)
    # a run of this machine is not gated
    state.opener.open_run(write_fake_run(state.history.runs_dir, steps=2, run_id="mine"))
    state.pipeline.set_status("waiting")
    assert bar.replay.isEnabled() and bar.replay.toolTip() == "Re-run with exactly the recorded settings (Ctrl+R)"


# -- 4. the engine busy with a bisection or a sweep ---------------------------------------------------------------
@pytest.fixture(scope="module")
def _module_window(qapp, request: pytest.FixtureRequest,  # noqa: ANN001 - pytest-qt's
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from pytestqt.qtbot import QtBot

    yield from open_fake_window(QtBot(request), tmp_path_factory, "followups-window")


@pytest.fixture
def fake_window(_module_window, qtbot, gui_env: Path):  # noqa: ANN001, ANN201
    """One window and stand-in engine for the two tests below, handed to each as new (on the test's runs folder)."""
    hand_over(_module_window, qtbot, gui_env)
    return _module_window


def test_bisect_and_sweep_say_engine_busy_and_queued_runs_wait(fake_window, gui_env: Path, qtbot,
                                                               tmp_path: Path) -> None:  # noqa: ANN001
    win = fake_window
    state, c = win.state, win.state.controller
    bad = write_fake_run(gui_env, steps=3, seed=2, run_id="bad", nan_at=1)
    assert c.bisect(str(bad)) and c.bisects.state == "running"  # the stand-in engine ignores `bisect`: it stays
    assert c.engine_state == "bisecting" and win.engine_label.text() == "engine busy: bisecting…"
    state.prompt.update(steps=2, seed=4)
    job = c.queue_run()
    assert job.status == "queued" and job.waiting == "waiting for the bisection"
    item = win.queue_panel._items[job.id]
    assert item.text(1) == "waiting" and "waiting for the bisection" in item.toolTip(1)
    qtbot.wait(300)
    assert job.status == "queued"  # nothing was sent to the engine meanwhile
    state.engine._dispatch(json.dumps({"event": "bisect_finished", "id": c.bisects._ident,
                                       "result": {"status": "cancelled"}}).encode("utf-8"))
    assert c.bisects.state == "idle" and job.waiting == ""
    qtbot.waitUntil(lambda: job.finished, timeout=WAIT_MS)
    assert job.status == "done" and win.engine_label.text() == "engine ready"
    # a sweep holds the engine the same way
    listing = tmp_path / "prompts.txt"
    listing.write_text("a red circle\n", encoding="utf-8")
    sweeps = state.opener.sweeps
    assert sweeps.start(listing, seeds="0") and sweeps.state == "running"
    assert win.engine_label.text() == "engine busy: sweeping…"
    queued = c.queue_run()
    assert queued.waiting == "waiting for the sweep" and win.queue_panel._items[queued.id].text(1) == "waiting"
    state.engine._dispatch(json.dumps({"event": "sweep_finished", "id": sweeps._ident, "status": "done",
                                       "summary": "1 run"}).encode("utf-8"))
    qtbot.waitUntil(lambda: queued.finished, timeout=WAIT_MS)
    assert queued.status == "done" and c.engine_state == "ready"


# -- 5. the engine busy with an export (the bug report with the first bad module's inputs re-runs the run) ---------
def test_an_export_holds_the_engine_and_queued_runs_wait(fake_window, qtbot) -> None:  # noqa: ANN001
    win = fake_window
    state, c = win.state, win.state.controller
    c.set_engine_busy("export", True)  # what the engine's `export` command holds while it runs
    assert c.engine_state == "exporting"
    state.prompt.update(steps=2, seed=6)
    job = c.queue_run()
    assert job.status == "queued" and job.waiting == "waiting for the export"
    item = win.queue_panel._items[job.id]
    assert item.text(1) == "waiting" and "waiting for the export" in item.toolTip(1)
    qtbot.wait(300)
    assert job.status == "queued"  # nothing was sent to the engine meanwhile
    c.set_engine_busy("export", False)
    assert job.waiting == ""
    qtbot.waitUntil(lambda: job.finished, timeout=WAIT_MS)
    assert job.status == "done" and c.engine_state == "ready" and win.engine_label.text() == "engine ready"

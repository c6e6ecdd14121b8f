"""The step-data model: each step file read once per step change, off the GUI thread, for every view at once;
hidden views read nothing; stale reads are dropped; steps are the record's indexes (runs whose steps are not
0, 1, 2…); the attention over the run reads each step once. Synthetic runs, no engine."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QVBoxLayout, QWidget

from ghostviewer.gui.data.attention_data import aggregate
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.step_data_model import StepDataModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.feature_map_view import FeatureMapView
from ghostviewer.record import RunRecord, RunWriter, StatRow, StepInfo
from tests.gui.fake_runs import MODULES, write_fake_run

LAYERS = ("unet.down.attn2", "unet.mid.attn2")


def write_sparse_run(runs_dir: Path, steps: tuple[int, ...] = (5, 7, 9), anomaly_at: int = 7) -> Path:
    """A run whose recorded steps are `steps` (not 0, 1, 2…): latents filled with the step's index, feature
    maps of unet.mid_block, two attention layers, stats, and a first anomaly at `anomaly_at`."""
    settings = {"prompt": "a red circle", "seed": 1, "steps": 10, "guidance": 7.5, "source": "demo"}
    writer = RunWriter.create(runs_dir, settings, {"device": "cpu"})
    rng = np.random.default_rng(0)
    for seq, step in enumerate(steps):
        rows = [StatRow("denoise", step, m, 0, seq * 10 + i, (1, 4, 8, 8), "float32", -1.0, 1.0, 0.0, 0.5,
                        float(step + i), 0, 0) for i, m in enumerate(MODULES)]
        writer.add_stats(rows)
        tensors = {"latents": np.full((4, 8, 8), float(step), np.float32), "x0": np.zeros((4, 8, 8), np.float32),
                   "fm/unet.mid_block": rng.standard_normal((8, 4, 4)).astype(np.float16),
                   f"attn/{LAYERS[0]}": rng.random((6, 8, 8)).astype(np.float16),
                   f"attn/{LAYERS[1]}": rng.random((6, 4, 4)).astype(np.float16)}
        writer.add_step(StepInfo(step, 900.0 - step, None, 0.01, 1, 1, None, "rss"), tensors)
    writer.set_verdict({"label": "nan", "scores": {}},
                       {"phase": "denoise", "step": anomaly_at, "module": "unet.mid_block", "kind": "nan"})
    writer.finish("done", 0.1)
    return writer.path


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter]:
    """Counts RunRecord.step_tensors calls per step index (whichever thread makes them)."""
    counts: Counter = Counter()
    original = RunRecord.step_tensors

    def counting(self: RunRecord, step: int) -> dict[str, np.ndarray]:
        counts[int(step)] += 1
        return original(self, step)

    monkeypatch.setattr(RunRecord, "step_tensors", counting)
    yield counts


def test_each_step_file_is_read_once_per_step_change(window, gui_env: Path, qtbot, reads: Counter) -> None:  # noqa: ANN001
    state = window.state  # not shown: every view is "on screen" and wants each step
    state.opener.open_run(write_fake_run(gui_env, steps=6, capture=("unet.mid_block",)))
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    for step in (2, 3, 1):
        state.timeline.set_step(step)
        qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    assert reads == {5: 1, 2: 1, 3: 1, 1: 1}  # images, feature maps and attention share one read
    assert window.feature_maps.step_data.step == window.step_images.shown.step == window.attention.step_data.step == 1
    state.timeline.set_step(3)  # seen lately: from the cache
    assert reads[3] == 1 and window.step_images.shown.step == 3


def test_a_hidden_view_reads_nothing(qtbot, gui_env: Path, reads: Counter) -> None:  # noqa: ANN001
    timeline, blocks = TimelineModel(), BlockModel()
    data = StepDataModel(timeline, synchronous=True)
    holder = QWidget()
    qtbot.addWidget(holder)
    view = FeatureMapView(timeline, blocks, data)
    QVBoxLayout(holder).addWidget(view)
    view.hide()  # as in a closed dock
    holder.show()
    timeline.open_run(write_fake_run(gui_env, steps=4, capture=("unet.mid_block",)))
    timeline.set_step(1)
    assert reads == {} and not view.captured  # nobody looks: nothing read, nothing drawn
    view.show()  # it asks for the step it missed
    assert reads == {1: 1} and view.captured and view.grid is not None and "@ step 1" in view.title.text()


def test_a_view_behind_a_dock_tab_waits_until_raised(window, gui_env: Path, qtbot, reads: Counter) -> None:  # noqa: ANN001
    state = window.state
    window.show()
    qtbot.waitExposed(window)
    state.opener.open_run(write_fake_run(gui_env, steps=5, capture=("unet.mid_block",)))
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    assert window.heatmap.isVisible() and window.feature_maps.visibleRegion().isEmpty()  # behind the heat map
    drawn = window.feature_maps.title.text()
    state.timeline.set_step(2)
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    assert reads[2] == 1 and window.feature_maps.title.text() == drawn  # the hidden view did no work
    next(d for d in window.docks if d.widget() is window.feature_maps).raise_()
    assert "@ step 2" in window.feature_maps.title.text() and reads[2] == 1  # drawn from what was read


def test_stale_results_are_dropped(qtbot, gui_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    run = RunRecord(write_fake_run(gui_env, steps=4))
    gate, order = threading.Event(), []
    original = RunRecord.step_tensors

    def slow(self: RunRecord, step: int) -> dict[str, np.ndarray]:
        order.append(step)
        if step == 1:
            assert gate.wait(10)
        return original(self, step)

    monkeypatch.setattr(RunRecord, "step_tensors", slow)
    data = StepDataModel()  # asynchronous, no views: every selection is wanted
    shown: list[int] = []
    data.stepLoaded.connect(lambda d: shown.append(d.step))
    data.select(run, 1)
    qtbot.waitUntil(lambda: order == [1], timeout=5000)
    data.select(run, 2)  # the user moves on while step 1 is being read…
    data.select(run, 3)  # …and on again
    gate.set()
    qtbot.waitUntil(lambda: data.idle, timeout=5000)
    assert shown == [3] and data.current.step == 3 and data.dropped == 1
    assert order == [1, 3]  # step 2 was never read: only the newest wish is
    data.shutdown()


def test_steps_are_the_records_indexes(window, gui_env: Path, qtbot, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    state, timeline = window.state, window.state.timeline
    state.opener.open_run(write_sparse_run(gui_env))
    qtbot.waitUntil(lambda: state.step_data.idle and not window.heatmap.loading, timeout=5000)
    assert (timeline.step, timeline.position, window.timeline_bar.slider.value()) == (9, 2, 2)
    assert window.step_images.shown.step == 9 and float(state.step_data.current.latents.max()) == 9.0
    window.timeline_bar.slider.setValue(0)
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    assert timeline.step == 5 and "step 5 of 0–9" in window.timeline_bar.step_label.full_text
    assert float(window.step_images.shown.latents.max()) == 5.0  # the file of step 5, not of step 0
    assert window.feature_maps.step_data.step == 5 and abs(window.stat_plot.line.value() - 5) < 1e-9
    window.actions.step_forward.trigger()
    assert timeline.step == 7
    timeline.set_step(6)  # not recorded: the nearest recorded step
    assert timeline.step in (5, 7)
    window.heatmap.select_cell(0, 2)  # the third column is step 9
    assert timeline.step == 9 and window.heatmap.grid.steps == [5, 7, 9]
    window.actions.jump_anomaly.trigger()
    assert timeline.step == 7
    sent: list[dict] = []
    monkeypatch.setattr(state.engine, "send", lambda cmd, **fields: sent.append({"cmd": cmd, **fields}) or 1)
    state.controller.decode_step()
    assert sent[-1]["cmd"] == "decode" and sent[-1]["step"] == 7
    x_lo, x_hi = window.stat_plot.plot.getViewBox().viewRange()[0]
    assert x_lo <= 5 and x_hi >= 9


def test_attention_over_the_run_reads_each_step_once(window, gui_env: Path, qtbot, reads: Counter) -> None:  # noqa: ANN001
    state, view = window.state, window.attention
    run = write_sparse_run(gui_env)
    state.opener.open_run(run)
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    view.whole_run.setChecked(True)
    qtbot.waitUntil(lambda: state.step_data.idle and state.step_data.attention_steps == 3, timeout=5000)
    record = RunRecord(run)
    every = [m for s in (5, 7, 9) for name, m in record.step_tensors(s).items() if name.startswith("attn/")]
    reads.clear()
    assert view.maps is not None and np.allclose(view.maps, aggregate(every, view.maps.shape[0]), atol=1e-6)
    for step in (5, 7, 9, 5):
        state.timeline.set_step(step)
        qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    assert reads == {5: 1, 7: 1}  # the step changes alone; 9 and the second 5 come from the cache
    view.layer.setCurrentText(LAYERS[1])
    one = [m for s in (5, 7, 9) for m in [record.step_tensors(s)[f"attn/{LAYERS[1]}"]]]
    assert np.allclose(view.maps, aggregate(one, view.maps.shape[0]), atol=1e-6)


def test_the_second_slot_shows_another_run(window, gui_env: Path, qtbot) -> None:  # noqa: ANN001
    state = window.state
    a, b = write_fake_run(gui_env, steps=3, seed=1), write_sparse_run(gui_env)
    state.opener.open_run(a)
    with qtbot.waitSignal(state.step_data_b.stepLoaded, timeout=5000) as loaded:
        state.step_data_b.select(RunRecord(b), 7)
    assert loaded.args[0].run_dir == str(b) and float(loaded.args[0].latents.max()) == 7.0
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    assert state.step_data.current.run_dir == str(a) and state.step_data.current.step == 2


def test_synchronous_mode_delivers_before_returning(gui_env: Path) -> None:
    data = StepDataModel(synchronous=True)
    shown: list[int] = []
    data.stepLoaded.connect(lambda d: shown.append(d.step))
    data.select(RunRecord(write_sparse_run(gui_env)), 9)
    assert shown == [9] and data.idle and not data.current.latents.flags.writeable  # shared, so read-only
    data.select(None, -1)
    assert shown == [9, -1] and data.current.empty

"""The Compare dock on two REAL runs of the demo pipeline (seeds 1 and 2, 3 steps, made once for the module):
settings side by side, the first divergence at the initial noise, the per-module delta heat map, both step
images and |A−B|, one slider scrubbing both timelines, and comparisons opened from the history (two selected
runs, a replay study)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt

from ghostviewer.analysis.compare import delta_grid
from ghostviewer.gui import messages
from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.record import RunRecord, StudyWriter
from tests.gui.live_window import needs_demo

pytestmark = needs_demo
PROMPT = "a red circle on a blue background"
WAIT_MS = 10_000


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from ghostviewer import api

    folder = tmp_path_factory.mktemp("compare-runs")
    a = api.run("demo", PROMPT, seed=1, steps=3, runs_dir=folder, device="cpu")
    b = api.run("demo", PROMPT, seed=2, steps=3, runs_dir=folder, device="cpu")
    return Path(a["run_dir"]), Path(b["run_dir"])


def _window(settings: Path, runs: tuple[Path, Path]) -> object:
    """A shown window at 1366×768 (no engine: a comparison reads records only) on the module's runs folder."""
    from ghostviewer.gui.app import create_window

    window = create_window(AppSettings(settings), dialogs=False)
    window.state.history.set_runs_dir(runs[0].parent)
    window.show()
    window.resize(1366, 768)
    return window


@pytest.fixture
def fresh_win(qtbot, runs: tuple[Path, Path], tmp_path: Path) -> Iterator:  # noqa: ANN001 - pytest-qt's fixture
    """A new window: what the first comparison a user opens does to it."""
    window = _window(tmp_path / "settings.ini", runs)
    qtbot.addWidget(window)
    yield window
    window.state.controller.shutdown()


@pytest.fixture(scope="module")
def win(qapp, runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001
    """One window for the tests below, which compare again in it (as a user does) or pick from its history."""
    window = _window(tmp_path_factory.mktemp("compare-view") / "settings.ini", runs)
    yield window
    window.state.controller.shutdown()
    window.close()
    window.deleteLater()


def _compare(qtbot, win, a: Path, b: Path) -> object:  # noqa: ANN001
    model = win.state.controller.compare
    with qtbot.waitSignal(model.comparisonChanged, timeout=WAIT_MS):
        assert win.state.controller.compare_runs(str(a), str(b))
    assert model.comparison is not None, model.error
    return model


def test_delta_grid_starts_at_the_initial_noise(runs: tuple[Path, Path]) -> None:
    a, b = RunRecord(runs[0]), RunRecord(runs[1])
    modules, columns, deltas, differs = delta_grid(a.stats(), b.stats(), "std")
    assert columns[0] == ("encode", None) and columns[-1] == ("decode", None) and ("denoise", 2) in columns
    text = [i for i, m in enumerate(modules) if m.startswith("text_encoder")]
    assert text and not differs[text].any() and np.all(deltas[text, 0] == 0)  # same prompt: same embeddings
    noise = modules.index("pipeline.prepare_latents"), columns.index(("denoise", 0))
    assert differs[noise] and deltas[noise] > 0


def test_two_seeds_side_by_side(fresh_win, qtbot, runs: tuple[Path, Path]) -> None:  # noqa: ANN001
    win = fresh_win
    model = _compare(qtbot, win, *runs)
    view, state = win.compare_view, win.state
    assert view.isVisible(), "opening a comparison brings the Compare dock forward"
    seed_row = next(r for r in range(view.settings.rowCount()) if view.settings.item(r, 0).text() == "seed")
    assert seed_row == 0 and [view.settings.item(0, c).text() for c in (1, 2)] == ["1", "2"]
    assert view.settings.item(0, 1).background().color().name() != view.settings.item(1, 1).background().color().name()
    prompt_row = next(r for r in range(view.settings.rowCount()) if view.settings.item(r, 0).text() == "prompt")
    assert view.settings.item(prompt_row, 1).text() == view.settings.item(prompt_row, 2).text() == PROMPT
    where = model.comparison.first_divergence
    assert (where["phase"], where["step"], where["module"]) == ("denoise", 0, "pipeline.prepare_latents")
    assert "pipeline.prepare_latents" in view.divergence.text()
    assert state.blocks.selected == "pipeline.prepare_latents"  # opened at the first divergence
    assert state.timeline.run_dir == str(runs[0]) and state.timeline.step == 0
    assert model.timeline_b.run_dir == str(runs[1]) and model.timeline_b.step == 0


def test_the_delta_heat_map_is_not_uniform(win, qtbot, runs: tuple[Path, Path]) -> None:  # noqa: ANN001
    _compare(qtbot, win, *runs)
    heat = win.compare_view.heatmap
    image = heat.image.image
    assert image is not None and image.shape[:2] == (len(win.state.controller.compare.comparison.modules), 5)
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 5
    lo, hi = heat.levels
    assert hi - lo > 0.5  # log10 of the relative deltas spans more than half a decade
    grab = heat.plot.grab().toImage()
    pixels = {grab.pixelColor(x, y).name() for x in range(0, grab.width(), 7) for y in range(0, grab.height(), 7)}
    assert len(pixels) > 10, "the heat map is drawn with many colours on screen"


def test_both_step_images_and_their_difference(win, qtbot, runs: tuple[Path, Path]) -> None:  # noqa: ANN001
    model = _compare(qtbot, win, *runs)
    state, panes = win.state, win.compare_view.panes
    qtbot.waitUntil(lambda: state.step_data.idle and state.step_data_b.idle and model.step_diff is not None,
                    timeout=WAIT_MS)
    assert state.step_data.current.run_dir == str(runs[0]) and state.step_data_b.current.run_dir == str(runs[1])
    for name in ("A step", "B step", "|A−B| step", "A final", "B final", "|A−B| final"):
        image = panes[name].image
        assert image is not None and float(np.ptp(image)) > 20, f"{name} is uniform"
    assert not np.array_equal(panes["A step"].image, panes["B step"].image)


def test_one_slider_scrubs_both_timelines(win, qtbot, runs: tuple[Path, Path]) -> None:  # noqa: ANN001
    model = _compare(qtbot, win, *runs)
    state, view = win.state, win.compare_view
    view.slider.setValue(2)
    assert state.timeline.step == 2 and model.timeline_b.step == 2 and view.step_label.text() == "step 2"
    qtbot.waitUntil(lambda: state.step_data_b.current.step == 2 and state.step_data.current.step == 2,
                    timeout=WAIT_MS)
    state.timeline.set_step(1)  # the main timeline drives B too
    assert model.timeline_b.step == 1 and view.slider.value() == 1
    state.blocks.select("unet.mid_block")
    qtbot.mouseClick(view.divergence, Qt.MouseButton.LeftButton)
    assert state.timeline.step == 0 and model.timeline_b.step == 0
    assert state.blocks.selected == "pipeline.prepare_latents"


def test_compare_two_runs_selected_in_the_history(win, qtbot, runs: tuple[Path, Path]) -> None:  # noqa: ANN001
    state, tree = win.state, win.history_panel.tree
    qtbot.waitUntil(lambda: tree.topLevelItemCount() >= 2, timeout=WAIT_MS)
    items = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
    for item in items:
        item.setSelected(str(item.data(0, Qt.ItemDataRole.UserRole)) in map(str, runs))
    with qtbot.waitSignal(state.controller.compare.comparisonChanged, timeout=WAIT_MS):
        win.actions.compare_selected.trigger()
    comparison = state.controller.compare.comparison
    assert (comparison.run_a, comparison.run_b) == (str(runs[0]), str(runs[1]))  # the older run is A
    tree.clearSelection()
    win.actions.compare_selected.trigger()  # nothing picked: said, nothing breaks
    assert state.reporter.last_message == messages.COMPARE_PICK_TWO


def test_a_replay_study_opens_its_diverging_rerun(win, qtbot, runs: tuple[Path, Path]) -> None:  # noqa: ANN001
    original, rerun = runs
    study = StudyWriter.create(original.parent, "replay", {"original": str(original), "times": 1}, total=1)
    study.add_run(original, {"original": original.name}, role="original", summary=RunRecord(original).summary())
    study.add_run(rerun, {"replay": 1}, role="replay", summary=RunRecord(rerun).summary(), note="diverged: fingerprint")
    study.finish("done", result={"reproduced": False, "first_divergence": {"run": 1, "phase": "denoise"},
                                 "summary": "reproduced 0/1"})
    state = win.state
    state.history.refresh()
    with qtbot.waitSignal(state.controller.compare.comparisonChanged, timeout=WAIT_MS):
        win.history_panel.select(str(study.path))
    comparison = state.controller.compare.comparison
    assert (comparison.run_a, comparison.run_b) == (str(original), str(rerun))
    assert win.compare_view.isVisible() and state.blocks.selected == "pipeline.prepare_latents"

"""The Runs history follows the window: after Replay ×3 the shown run is still the current row (scrolled into
view, not left on another one), the window's replays are ONE replay study row (the original and its replays
inside it, as `ghostviewer replay --times` records them), and every row is as tall as the others."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from ghostviewer.gui.widgets.history_panel import KIND_ROLE, PATH_ROLE
from ghostviewer.record import StudyRecord
from tests.gui.fake_runs import write_fake_run
from tests.gui.handover import hand_over, open_fake_window

WAIT_MS = 30_000
SETTINGS = {"prompt": "a red circle", "seed": 3, "steps": 3, "guidance": 7.5, "source": "demo", "device": "cpu"}


@pytest.fixture(scope="module")
def _module_window(qapp, request: pytest.FixtureRequest,  # noqa: ANN001 - pytest-qt's
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from pytestqt.qtbot import QtBot

    yield from open_fake_window(QtBot(request), tmp_path_factory, "history-follows-window")


@pytest.fixture
def fake_window(_module_window, qtbot, gui_env: Path):  # noqa: ANN001, ANN201
    """One window and stand-in engine for the module, handed to each test as new (on the test's runs folder)."""
    hand_over(_module_window, qtbot, gui_env)
    return _module_window


def test_replays_are_one_study_row_and_the_shown_run_stays_current(fake_window, qtbot, gui_env: Path) -> None:  # noqa: ANN001
    state, panel = fake_window.state, fake_window.history_panel
    for seed in range(12):  # enough rows that the shown one can scroll out of view
        write_fake_run(gui_env, steps=2, seed=seed, run_id=f"20261201-0900{seed:02d}-00000{seed % 10}")
    original = write_fake_run(gui_env, seed=3, run_id="20261201-095900-aaaaaa", settings=SETTINGS)
    state.history.refresh()
    state.opener.open_run(str(original))
    with qtbot.waitSignal(state.controller.sigReplayChecked, timeout=WAIT_MS) as checked:
        state.controller.replay(str(original), times=3)
    result = checked.args[0]
    assert result["checked"] == 3 and Path(result["study_dir"]).is_dir()
    qtbot.waitUntil(lambda: any(s.kind == "replay" for s in state.history.studies), timeout=WAIT_MS)
    QApplication.processEvents()
    top = [panel.tree.topLevelItem(i) for i in range(panel.tree.topLevelItemCount())]
    top_paths = {Path(str(i.data(0, PATH_ROLE))) for i in top}
    assert all(Path(r).parent.parent == Path(result["study_dir"]) for r in result["replays"])
    assert not top_paths & {Path(r) for r in result["replays"]}, "no replay is a row of its own"
    study = StudyRecord(result["study_dir"])
    assert study.kind == "replay" and study.status == "done"
    assert [r.role for r in study.runs()] == ["original", "replay", "replay", "replay"]
    summary = f"reproduced {result['reproduced_count']}/3"
    assert summary in next(s.result for s in state.history.studies if s.kind == "replay")
    current = panel.tree.currentItem()
    assert current is not None and Path(str(current.data(0, PATH_ROLE))) == original
    assert panel.tree.visualItemRect(current).intersects(panel.tree.viewport().rect()), "scrolled into view"
    assert state.timeline.run_dir is not None and Path(state.timeline.run_dir) == original  # not re-opened away


def test_every_history_row_is_as_tall_as_the_others(fake_window, qtbot, gui_env: Path) -> None:  # noqa: ANN001
    state, panel = fake_window.state, fake_window.history_panel
    original = write_fake_run(gui_env, seed=3, run_id="20261201-095900-aaaaaa", settings=SETTINGS)
    with qtbot.waitSignal(state.controller.sigReplayChecked, timeout=WAIT_MS):
        state.controller.replay(str(original), times=2)  # a study row (no thumbnail), newest: the first row
    qtbot.waitUntil(lambda: any(s.kind == "replay" for s in state.history.studies), timeout=WAIT_MS)
    QApplication.processEvents()
    items = [panel.tree.topLevelItem(i) for i in range(panel.tree.topLevelItemCount())]
    assert items[0].data(0, KIND_ROLE) == "study" and len(items) == 2
    heights = {panel.tree.visualItemRect(i).height() for i in items}
    assert len(heights) == 1 and heights.pop() >= 26, heights

"""Bisection from the window: the engine's `bisect` command (spoken to an in-process EngineSession on a REAL
fp16-vae-overflow run of the demo pipeline), the trail filled live from its events, and the same trail read back
from the study record when the study is picked in the history, ending with the culprit in focus."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QObject, Signal

from ghostviewer.gui import messages
from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.coordinators.bisect_coordinator import BisectCoordinator
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.bisect_trail import BisectTrail
from tests.gui.live_window import needs_demo

pytestmark = needs_demo
CULPRIT = "vae.decoder.up_blocks.1.resnets.0"


@pytest.fixture(scope="module")
def bisected(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A failing run and the events of the engine's `bisect` command on it."""
    from ghostviewer import api
    from ghostviewer.engine.server import Emitter, EngineSession

    folder = tmp_path_factory.mktemp("bisect-runs")
    bad = api.run("demo", "a red circle on a blue background", seed=1, steps=3, runs_dir=folder, device="cpu",
                  faults=["fp16-vae-overflow"])
    out = io.StringIO()
    EngineSession(Emitter(out)).handle({"cmd": "bisect", "id": 5, "run_dir": bad["run_dir"], "runs_dir": str(folder)})
    return Path(bad["run_dir"]), [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_engine_bisects_with_progress_events(bisected: tuple[Path, list[dict[str, Any]]]) -> None:
    _bad, events = bisected
    assert all(e["id"] == 5 for e in events)
    stages = [e.get("stage") for e in events if e["event"] == "bisect_progress"]
    assert stages[0] == "bisect_started" and "trial_started" in stages and "trial" in stages
    assert events[-1]["event"] == "bisect_finished" and events[-1]["result"]["culprit"] == CULPRIT
    assert sum(e["event"] == "bisect_finished" for e in events) == 1


def test_a_bisection_that_cannot_start_is_one_error_line(tmp_path: Path) -> None:
    from ghostviewer.engine.server import Emitter, EngineSession

    out = io.StringIO()
    EngineSession(Emitter(out)).handle({"cmd": "bisect", "id": 6, "run_dir": str(tmp_path)})
    (event,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert event["event"] == "error" and event["cmd"] == "bisect" and event["id"] == 6


class StubEngine(QObject):
    """What the coordinator needs of the engine client: send() and the signals it listens to."""

    sigError = Signal(dict)
    sigEngineDied = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        self._signals: dict[str, Any] = {}
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, cmd: str, **fields: Any) -> int:
        self.sent.append((cmd, fields))
        return len(self.sent)


class StubScheduler(QObject):
    stateChanged = Signal(str)
    engine_state = "ready"


@pytest.fixture
def trail(qtbot, bisected: tuple[Path, list[dict[str, Any]]]) -> Iterator:  # noqa: ANN001
    engine = StubEngine()
    timeline, blocks = TimelineModel(), BlockModel()
    coordinator = BisectCoordinator(engine, StubScheduler(), timeline, blocks, HistoryModel(bisected[0].parent),
                                    ErrorReporter(dialogs=False))
    view = BisectTrail(coordinator)
    qtbot.addWidget(view)
    timeline.open_run(bisected[0])
    yield engine, coordinator, view


def test_the_trail_fills_live_and_ends_on_the_culprit(trail, bisected) -> None:  # noqa: ANN001
    engine, coordinator, view = trail
    bad, events = bisected
    assert coordinator.bisect() and engine.sent[0] == ("bisect", {"run_dir": str(bad), "runs_dir": str(bad.parent)})
    assert coordinator.state == "running" and not view.bisect_button.isEnabled()
    seen_running = False
    for event in events:
        signal = engine._signals[event["event"]] if event["event"] != "error" else engine.sigError
        signal.emit({**event, "id": 1})
        if event.get("stage") == "trial_step" and event["trial"] == 1:
            seen_running = seen_running or view.table.item(0, 3).text().startswith("running")
    assert seen_running, "a re-run shows its progress while it runs"
    result = events[-1]["result"]
    assert coordinator.state == "idle" and coordinator.blocks.selected == CULPRIT
    assert view.table.rowCount() >= result["reruns"]
    assert [view.table.item(r, 3).text() for r in range(result["reruns"])] == [
        "yes" if e["symptom"] else "no" for e in result["trail"]]
    assert CULPRIT in view.result.text()


def test_a_healthy_run_is_not_bisected(trail, tmp_path: Path) -> None:  # noqa: ANN001
    from tests.gui.fake_runs import write_fake_run

    engine, coordinator, _view = trail
    assert not coordinator.bisect(str(write_fake_run(tmp_path, steps=2, seed=1)))
    assert engine.sent == [] and coordinator.reporter.last_message.startswith("Nothing to bisect")


def test_the_study_opens_as_its_trail_from_the_history(qtbot, bisected, tmp_path: Path) -> None:  # noqa: ANN001
    from ghostviewer.gui.app import create_window

    bad, events = bisected
    result = events[-1]["result"]
    win = create_window(AppSettings(tmp_path / "settings.ini"), dialogs=False)
    qtbot.addWidget(win)
    win.state.history.set_runs_dir(bad.parent)
    win.show()
    win.resize(1366, 768)
    win.history_panel.select(result["study_dir"])
    state, view = win.state, win.bisect_trail
    assert view.isVisible() and state.blocks.selected == CULPRIT
    assert state.timeline.run_dir == str(bad)  # the heat map shows the bad run, the culprit in focus
    assert view.table.rowCount() == result["reruns"] and CULPRIT in view.result.text()
    assert messages.BISECT_CULPRIT.split("{")[0] in win.statusBar().currentMessage()
    view.table.cellClicked.emit(0, 0)  # a re-run opens in the timeline
    assert state.timeline.run_dir == result["trail"][0]["run_dir"]
    win.state.controller.shutdown()

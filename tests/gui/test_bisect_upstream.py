"""Bisection of an upstream ghost (nan-latents: NaN from pipeline.prepare_latents, before every block), from a REAL
demo run and the engine's own `bisect` events: the trail never says "budget ?" — it says no block can be re-run —
and the reason is shown whole in the dock (the status bar only points there)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication

from ghostviewer.gui.coordinators.bisect_coordinator import BisectCoordinator
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.bisect_trail import BisectTrail
from tests.gui.live_window import needs_demo
from tests.gui.test_bisect_trail import StubEngine, StubScheduler

pytestmark = needs_demo


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    from ghostviewer import api
    from ghostviewer.engine.server import Emitter, EngineSession

    folder = tmp_path_factory.mktemp("upstream-runs")
    bad = api.run("demo", "a blue triangle on a yellow background", seed=17, steps=3, runs_dir=folder,
                  device="cpu", faults=["nan-latents"])
    out = io.StringIO()
    EngineSession(Emitter(out)).handle({"cmd": "bisect", "id": 5, "run_dir": bad["run_dir"], "runs_dir": str(folder)})
    return Path(bad["run_dir"]), [json.loads(line) for line in out.getvalue().splitlines()]


def test_an_upstream_ghost_says_no_block_and_why_whole(qtbot, upstream) -> None:  # noqa: ANN001
    bad, events = upstream
    engine = StubEngine()
    timeline = TimelineModel()
    coordinator = BisectCoordinator(engine, StubScheduler(), timeline, BlockModel(), HistoryModel(bad.parent),
                                    ErrorReporter(dialogs=False))
    messages_seen: list[str] = []
    coordinator.sigMessage.connect(messages_seen.append)
    view = BisectTrail(coordinator)
    qtbot.addWidget(view)
    view.resize(560, 190)  # the bottom dock's share of the centre at 1280×720
    view.show()
    timeline.open_run(bad)
    assert coordinator.bisect()
    assert "?" not in view.header.text(), view.header.text()  # before the engine has said anything
    for event in events:
        signal = engine._signals[event["event"]] if event["event"] != "error" else engine.sigError
        signal.emit({**event, "id": 1})
    QApplication.processEvents()
    result = events[-1]["result"]
    assert result.get("culprit") is None and result.get("reason")
    header = view.header.text()
    assert "?" not in header and "budget" not in header and "no candidate block" in header, header
    text = view.result.text()
    assert result["reason"].rstrip(".") in text, (text, result["reason"])
    # the label is as tall as its wrapped text: nothing cut at the bottom
    assert view.result.height() >= view.result.heightForWidth(view.result.width()), view.result.height()
    assert messages_seen and "Bisection dock" in messages_seen[-1] and "budget" not in messages_seen[-1]

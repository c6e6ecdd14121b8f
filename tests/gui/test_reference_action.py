"""Run ▸ Compare with a known-good model… and Run ▸ Judge against baseline file…: what the actions send, what the
window shows of the engine's answer (the departure in the Compare dock, the verdict and what judged it in the
status bar), and the engine's `judge_against` command itself on the real demo pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ghostviewer import api
from ghostviewer.analysis.baseline_store import SHIPPED_BASELINES
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR
from ghostviewer.engine.server import EngineSession
from tests.gui.fake_runs import write_fake_run


def _menu_texts(window) -> list[str]:  # noqa: ANN001
    run_menu = next(m for m in window.menuBar().actions() if m.text() == "&Run").menu()
    return [a.text() for a in run_menu.actions()]


def test_compare_with_a_known_good_model_sends_the_call_and_shows_the_departure(
        window, gui_env: Path, qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    assert "Compare with a &known-good model…" in _menu_texts(window)
    suspect = write_fake_run(gui_env, steps=4, run_id="suspect")
    good = write_fake_run(gui_env, steps=4, run_id="good")
    window.state.timeline.open_run(suspect)
    sent: list[tuple[str, dict[str, Any]]] = []
    window.state.engine.send = lambda cmd, **fields: sent.append((cmd, fields)) or 11
    window.reference.ask_folder = lambda: str(tmp_path / "good-model")
    window.actions.compare_reference.trigger()
    assert sent == [("judge_against", {"run_dir": str(suspect), "reference": str(tmp_path / "good-model"),
                                       "runs_dir": str(gui_env)})]

    departure = {"phase": "denoise", "step": 2, "module": "unet.mid_block.resnets.0", "stat": "same-input output",
                 "ratio": 0.6, "limit": 0.05, "unit": "relative L2", "typical": 0.005}
    result = {"source": str(tmp_path / "good-model"), "run_dir": str(good), "first_departure": departure,
              "summary": "leaves the reference's range first at unet.mid_block.resnets.0 (step 2)", "by": "same inputs"}
    event = {"event": "reference_finished", "id": 11, "run_dir": str(suspect), "result": result}
    coordinator = window.reference.coordinator
    with qtbot.waitSignal(coordinator.departureFound, timeout=2000):
        window.state.engine._dispatch(json.dumps(event).encode())
    compare = window.state.controller.compare
    assert compare.active and Path(compare.timeline_b.run_dir) == Path(good)
    assert window.state.blocks.selected == "unet.mid_block.resnets.0"
    assert window.state.timeline.step == 2
    assert "leaves the reference's range first at unet.mid_block.resnets.0" in window.statusBar().currentMessage()
    assert coordinator.pending == {}


def test_judge_against_a_baseline_file_says_the_verdict_and_what_judged_it(window, gui_env: Path, qtbot) -> None:  # noqa: ANN001
    assert "Judge against &baseline file…" in _menu_texts(window)
    run = write_fake_run(gui_env, steps=4, run_id="shown")
    window.state.timeline.open_run(run)
    sent: list[tuple[str, dict[str, Any]]] = []
    window.state.engine.send = lambda cmd, **fields: sent.append((cmd, fields)) or 12
    window.reference.ask_file = lambda: "/baselines/b.json"
    window.actions.judge_baseline.trigger()
    assert sent == [("judge_against", {"run_dir": str(run), "baseline": "/baselines/b.json", "runs_dir": str(gui_env)})]
    result = {"verdict": {"label": "ok"}, "first_anomaly": None,
              "baseline": {"file": "/baselines/b.json", "match": "architecture",
                           "differences": ["steps 30 vs 20: compared on normalised time"]}}
    with qtbot.waitSignal(window.reference.coordinator.judged, timeout=2000):
        window.state.engine._dispatch(json.dumps({"event": "judged", "id": 12, "result": result}).encode())
    line = window.statusBar().currentMessage()
    assert "Judged by /baselines/b.json (architecture: steps 30 vs 20" in line and "verdict ok" in line


def test_without_a_shown_run_nothing_is_sent(window, qtbot) -> None:  # noqa: ANN001
    window.state.engine.send = lambda cmd, **fields: pytest.fail("sent without a run")
    assert window.reference.compare_with_reference() is None
    assert "Open or make a run first" in window.statusBar().currentMessage()


def test_the_engine_command_on_the_real_demo(demo_loaded, tmp_path: Path) -> None:  # noqa: ANN001
    events: list[dict[str, Any]] = []
    session = EngineSession(lambda name, **fields: events.append({"event": name, **fields}))
    session.loaded = demo_loaded
    run = api.run("demo", "a red circle on a blue background", seed=3, steps=4, runs_dir=tmp_path)
    session.handle({"cmd": "judge_against", "id": 1, "run_dir": run["run_dir"], "reference": str(DEMO_PIPELINE_DIR)})
    done = events[-1]
    assert done["event"] == "reference_finished", events[-1]
    assert done["result"]["first_departure"] is None and done["result"]["same_inputs"] is True
    shipped = next(SHIPPED_BASELINES.glob("*.json"))
    session.handle({"cmd": "judge_against", "id": 2, "run_dir": run["run_dir"], "baseline": str(shipped)})
    judged = events[-1]
    assert judged["event"] == "judged" and judged["result"]["baseline"]["given"] is True
    assert judged["result"]["baseline"]["file"] == str(shipped) and judged["result"]["run_dir"] != run["run_dir"]
    session.handle({"cmd": "judge_against", "id": 3, "run_dir": run["run_dir"]})
    assert events[-1]["event"] == "error" and "a reference or a baseline" in events[-1]["message"]

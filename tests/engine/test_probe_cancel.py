"""Stopping a probe battery from the window: the engine's `probe` command honours a cancel that came while it
waited in the queue (nothing runs) and one that comes mid-battery (no probe is judged from runs cut short)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ghostviewer.engine.server import EngineSession
from ghostviewer.record import StudyRecord


def _session(demo_loaded: Any, events: list[dict[str, Any]]) -> EngineSession:
    session = EngineSession(lambda event, **fields: events.append({"event": event, **fields}))
    session.loaded = demo_loaded
    return session


def test_a_probe_battery_cancelled_before_it_began_runs_nothing(demo_loaded: Any, tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    session = _session(demo_loaded, events)
    session.cancel(4)  # the user pressed Stop while the battery still waited behind another job
    session.handle({"cmd": "probe", "id": 4, "runs_dir": str(tmp_path), "steps": 2})
    report = events[-1]["result"]
    assert events[-1]["event"] == "probe_finished" and report["status"] == "cancelled"
    assert report["runs"] == 0 and report["findings"] == [] and report["ok"] is False
    assert report["summary"] == "cancelled after 0 of 10 probes"
    assert not any(e["event"] == "probe_progress" and e.get("stage") == "probe" for e in events)
    assert StudyRecord(report["study_dir"]).status == "cancelled"


def test_a_cancel_mid_battery_keeps_only_the_probes_judged_before_it(demo_loaded: Any, tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    session = _session(demo_loaded, events)

    def emit(event: str, **fields: Any) -> None:
        events.append({"event": event, **fields})
        if event == "probe_progress" and fields.get("stage") == "probe" and fields.get("probe") == "negative_effect":
            session.cancel(5)  # Stop pressed while the second probe's runs are under way

    session.emit = emit
    session.handle({"cmd": "probe", "id": 5, "runs_dir": str(tmp_path), "steps": 2})
    report = events[-1]["result"]
    assert report["status"] == "cancelled" and report["ok"] is False
    assert [f["probe"] for f in report["findings"]] == ["prompt_effect"]  # the one judged on whole runs
    assert report["summary"].startswith("cancelled after 1 of 10 probes")
    assert StudyRecord(report["study_dir"]).status == "cancelled"

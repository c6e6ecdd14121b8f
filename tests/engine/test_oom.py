"""Out of memory inside the engine: the run ends failed with the error, the engine takes the next run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ghostviewer.engine.faults import list_faults
from ghostviewer.engine.server import EngineSession
from ghostviewer.record import RunRecord
from tests.engine.test_runner import assert_no_leftovers


class Events:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        self.seen.append({"event": event, **fields})

    def ends(self, ident: int) -> list[dict[str, Any]]:
        return [e for e in self.seen if e.get("id") == ident and e["event"] in ("finished", "failed", "error")]


def test_oom_fault_is_listed_with_a_description() -> None:
    fault = next(f for f in list_faults() if f["name"] == "oom-at-step")
    assert "OutOfMemoryError" in fault["description"] and fault["module"]


def test_out_of_memory_fails_the_run_and_the_engine_goes_on(demo_loaded, runs_dir: Path) -> None:
    events = Events()
    session = EngineSession(events)
    session.loaded = demo_loaded
    settings = {"prompt": "a red circle on a blue background", "seed": 3, "steps": 5, "faults": ["oom-at-step"]}
    session.handle({"cmd": "run", "id": 1, "settings": settings, "runs_dir": str(runs_dir)})
    [failed] = events.ends(1)
    assert failed["event"] == "failed" and "OutOfMemoryError" in failed["error"]
    record = RunRecord(failed["run_dir"])
    assert record.status == "failed" and "OutOfMemoryError" in (record.error or "")
    assert [s.index for s in record.steps()] == [0, 1]  # the steps before the error are kept
    assert_no_leftovers(demo_loaded.pipe)

    session.handle({"cmd": "run", "id": 2, "settings": {**settings, "faults": []}, "runs_dir": str(runs_dir)})
    [finished] = events.ends(2)
    assert finished["event"] == "finished" and RunRecord(finished["run_dir"]).status == "done"

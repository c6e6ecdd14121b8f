"""The kill test through the GUI (issue 14 item 2), short: the real main window queues demo runs and its engine
process is SIGKILLed mid-run twice (scripts/kill_test.py --gui). The window stays up, each job ends failed for
the engine, says the engine process stopped, shows the run `incomplete` in its timeline and history, each record
reads `interrupted` with every step the window saw, and Restart engine brings the engine back for a run that is done.
On the live folder's shared window: the kills leave it a fresh engine."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.gui.live_window import needs_demo
from tests.kill_script import kill_test


@pytest.mark.slow
@needs_demo
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_two_engine_kills_through_the_window(live_window, tmp_path: Path,  # noqa: ANN001 - the live window
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GHOSTVIEWER_ENGINE_THREADS", "1")
    report = kill_test().gui_kills(tmp_path / "kills", kills=2, steps=8, seed=7, window=live_window)
    assert report["problems"] == [], report["problems"]
    assert report["kills"] == 2 and report["window_up"] and report["jobs_failed_for_the_engine"] == 2
    assert report["records_readable"] + report["no_record_yet"] == 2
    assert report["interrupted"] == report["records_readable"] >= 1
    assert report["steps_lost"] == 0 and report["steps_kept"] >= 1
    for result in report["results"]:
        assert result["ended_by"] == "engine" and "engine process" in result["job_error"]
        assert set(result["seen"]) <= set(range(result["steps"]))  # every step the window saw is in the record
    assert report["run_after_restart"] == "done"
    assert report["doctor"]["interrupted"] == report["records_readable"]

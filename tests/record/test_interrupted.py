"""Killed runs and studies read `interrupted` everywhere; `ghostviewer doctor` folds their logs back in; the kill
test (scripts/kill_test.py) in short: 3 SIGKILLs of the engine mid-run lose no committed step (each engine a fork
of this process, torch already imported: tests/kill_script.py)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.cli import main as cli_main
from ghostviewer.record import RunRecord, RunWriter, StepInfo, StudyRecord, StudyWriter
from ghostviewer.record.lock import LOCK_NAME, WriterLock, writer_alive
from tests.kill_script import kill_test

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "demo-pipeline" / "model_index.json"

WRITER = """
import sys, time
import numpy as np
from ghostviewer.record import RunWriter, StepInfo, StudyWriter
study = StudyWriter.create(sys.argv[1], "sweep", {}, total=3, study_id="study")
writer = RunWriter.create(study.runs_dir, {"prompt": "p", "seed": 1, "steps": 100}, {}, run_id="victim")
for step in range(100):
    writer.add_step(StepInfo(step, 900.0, None, 0.01, None, None, None, "rss"), {"latents": np.zeros(4, np.float32)})
    print(step, flush=True)
    time.sleep(0.01)
"""


def _step(writer: RunWriter, index: int) -> None:
    writer.add_step(StepInfo(index, 900.0, None, 0.01, None, None, None, "rss"), {"latents": np.zeros(4, np.float32)})


def _killed_writer(tmp_path: Path) -> tuple[Path, Path, int]:
    """A study and a run inside it, written by another process that is SIGKILLed after a few steps."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    last = -1
    while last < 3:
        last = int(proc.stdout.readline())
        study, run = tmp_path / "study", tmp_path / "study" / "runs" / "victim"
        assert RunRecord(run).status == "running" and StudyRecord(study).status == "running"  # alive: its lock
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return study, run, last


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_killed_writer_reads_interrupted_and_doctor_repairs_it(tmp_path: Path, capsys) -> None:
    study, run, last = _killed_writer(tmp_path)
    record = RunRecord(run)
    assert record.status == "interrupted" and not record.complete and record.summary()["status"] == "interrupted"
    assert StudyRecord(study).status == "interrupted" and StudyRecord(study).summary()["status"] == "interrupted"
    kept = [s.index for s in record.steps()]
    assert kept[: last + 1] == list(range(last + 1)) and (run / "run.sqlite-wal").exists()

    assert cli_main(["doctor", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["runs"], report["studies"], report["interrupted"], report["running"]) == (1, 1, 2, 0)
    assert not (run / "run.sqlite-wal").exists() and not (study / "study.sqlite-wal").exists()  # single files
    repaired = RunRecord(run)
    assert repaired.status == "interrupted" and [s.index for s in repaired.steps()] == kept
    assert "doctor" in (repaired.error or "") and StudyRecord(study).status == "interrupted"
    assert cli_main(["doctor", str(tmp_path)]) == 0  # twice: nothing more to do
    assert "0 marked interrupted" in capsys.readouterr().out


def test_a_live_writer_reads_running_and_doctor_leaves_it_alone(tmp_path: Path, capsys) -> None:
    writer = RunWriter.create(tmp_path, {"prompt": "p", "seed": 1, "steps": 3}, {})
    _step(writer, 0)
    assert writer_alive(writer.path) is True and RunRecord(writer.path).status == "running"
    assert cli_main(["doctor", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["running"] == 1
    _step(writer, 1)  # doctor did not take the record from its writer
    writer.finish("done", 1.0)
    assert writer_alive(writer.path) is False and RunRecord(writer.path).status == "done"


def test_a_run_without_a_lock_file_reads_interrupted(tmp_path: Path) -> None:
    writer = RunWriter.create(tmp_path, {"prompt": "p", "seed": 1, "steps": 3}, {})
    _step(writer, 0)
    (writer.path / LOCK_NAME).unlink()  # a run copied elsewhere, or made before runs had locks
    assert RunRecord(writer.path).status == "interrupted"


def test_a_study_being_written_cannot_be_resumed_by_another_writer(tmp_path: Path) -> None:
    study = StudyWriter.create(tmp_path, "sweep", {}, study_id="s")
    with pytest.raises(Exception, match="being written by another process"):
        WriterLock.acquire(study.path, "study")
    study.close()
    assert StudyRecord(study.path).status == "interrupted"
    StudyWriter.resume(study.path).finish("done")
    assert StudyRecord(study.path).status == "done"


@pytest.mark.slow
@pytest.mark.skipif(not DEMO.is_file() or not hasattr(signal, "SIGKILL"), reason="needs the demo and SIGKILL")
def test_three_engine_kills_lose_no_committed_step(tmp_path: Path) -> None:
    script = kill_test(forked_engines=True)
    os.environ.setdefault("GHOSTVIEWER_ENGINE_THREADS", "1")
    points = [(0, 0.0), (3, random.Random(1).uniform(0, 0.03)), (7, 0.0)]  # at the start, mid-run, late
    results = [script.kill_once(tmp_path / f"k{i}", after, jitter, steps=40, seed=i)
               for i, (after, jitter) in enumerate(points) if (tmp_path / f"k{i}").mkdir() is None]
    for result in results:
        assert result["problem"] is None and result["lost"] == 0, result
        assert result["record"] in ("readable", "none", "empty folder"), result
    assert all(r["status"] == "interrupted" for r in results[1:])  # killed mid-run: marked as such
    assert sum(r["steps"] for r in results) >= 3 + 7

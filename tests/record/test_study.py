"""Study records with real SQLite: write, read back, resume, survive a kill, refuse bad folders."""

from __future__ import annotations

import gc
import json
import re
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest

from ghostviewer.record import (
    RecordError,
    RunRecord,
    RunWriter,
    StudyRecord,
    StudyRun,
    StudyWriter,
    list_entries,
    list_runs,
    list_studies,
)
from ghostviewer.record.study_schema import STUDY_DB_NAME, canonical_key
from tests.record.test_record_kill import sigkill_after


def _child(runs_dir: Path, seed: int, label: str = "ok", run_id: str | None = None) -> dict:
    """A real, finished run; returns its CONTRACT summary (what the engine hands to add_run)."""
    writer = RunWriter.create(runs_dir, {"prompt": "a ghost", "seed": seed, "steps": 2}, {}, run_id=run_id)
    anomaly = None if label == "ok" else {"phase": "denoise", "step": 1, "module": "unet.mid_block", "kind": "nan"}
    writer.set_verdict({"label": label, "scores": {"std": 0.2}}, anomaly)
    writer.finish("done", 0.1)
    return RunRecord(writer.path).summary()


def _set_meta(db: Path, key: str, value: object) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))
    conn.close()


def test_create_add_progress_finish_read_back(tmp_path: Path) -> None:
    writer = StudyWriter.create(tmp_path, "sweep", {"prompts": ["a ghost"], "seeds": [0, 1]}, total=2)
    assert re.fullmatch(r"sweep-\d{8}-\d{6}-[0-9a-f]{6}", writer.study_id)
    assert writer.path == tmp_path / writer.study_id and writer.runs_dir.is_dir()
    first = _child(writer.runs_dir, 0)
    second = _child(writer.runs_dir, 1, label="nan")
    assert writer.add_run(first["run_dir"], {"prompt": "a ghost", "seed": 0}, summary=first) == 0
    writer.set_progress(1)
    assert StudyRecord(writer.path).progress == {"done": 1, "total": 2}  # committed at once
    assert writer.add_run(second["run_dir"], {"seed": 1, "prompt": "a ghost"}, role="trial", summary=second,
                          note="the ghost") == 1
    writer.set_progress(2)
    writer.set_result({"summary": "failure rate 50 %", "failure_rate": {"a ghost": 0.5}})
    writer.event("note", "half of them fail", rate=0.5)
    writer.finish("done")
    with pytest.raises(RecordError, match="finished"):
        writer.set_progress(3)

    record = StudyRecord(writer.path / STUDY_DB_NAME)  # the database file opens its folder
    assert (record.kind, record.status, record.complete) == ("sweep", "done", True)
    assert record.study_id == writer.study_id and record.created_at and record.error is None
    assert record.params == {"prompts": ["a ghost"], "seeds": [0, 1]}
    assert record.progress == {"done": 2, "total": 2}
    assert record.result == {"summary": "failure rate 50 %", "failure_rate": {"a ghost": 0.5}}
    runs = record.runs()
    assert runs[0] == StudyRun(0, {"prompt": "a ghost", "seed": 0}, "member", Path(first["run_dir"]), "done",
                               "ok", None, "")
    assert (runs[1].role, runs[1].verdict, runs[1].note) == ("trial", "nan", "the ghost")
    assert runs[1].first_anomaly == {"phase": "denoise", "step": 1, "module": "unet.mid_block", "kind": "nan"}
    assert RunRecord(runs[1].run_dir).settings["seed"] == 1
    assert [e.kind for e in record.events()] == ["note"] and record.events("note")[0].data == {"rate": 0.5}
    summary = record.summary()
    assert json.loads(json.dumps(summary))["runs"][1]["verdict"] == "nan"
    assert summary["status"] == "done" and summary["progress"] == {"done": 2, "total": 2}
    # the finished study is one file again (WAL folded back)
    assert not (writer.path / (STUDY_DB_NAME + "-wal")).exists()


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind"):
        StudyWriter.create(tmp_path, "séance", {})
    writer = StudyWriter.create(tmp_path, "replay", {"times": 3}, study_id="replay-a")
    with pytest.raises(RecordError, match="already exists"):
        StudyWriter.create(tmp_path, "replay", {}, study_id="replay-a")
    with pytest.raises(ValueError, match="bad file name"):
        StudyWriter.create(tmp_path, "replay", {}, study_id="../escape")
    writer.add_run(tmp_path / "x", {"replay": 0})
    with pytest.raises(RecordError, match="already has a run"):
        writer.add_run(tmp_path / "y", {"replay": 0})
    with pytest.raises(ValueError, match="JSON object"):
        writer.add_run(tmp_path / "z", [0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status"):
        writer.finish("great")
    writer.add_run(tmp_path / "y", {"replay": 1})  # the refused duplicate left the study writable
    writer.finish("done")
    assert [r.key for r in StudyRecord(writer.path).runs()] == [{"replay": 0}, {"replay": 1}]


def test_relative_and_absolute_run_dirs(tmp_path: Path) -> None:
    elsewhere = _child(tmp_path / "elsewhere", 3)
    writer = StudyWriter.create(tmp_path / "runs", "compare", {"a": elsewhere["run_dir"]}, study_id="cmp")
    inside = _child(writer.runs_dir, 4)
    writer.add_run(elsewhere["run_dir"], {"side": "a"}, role="original", summary=elsewhere)
    writer.add_run(inside["run_dir"], {"side": "b"}, role="replay", summary=inside)
    writer.finish("done", result={"same": False})
    with sqlite3.connect(writer.path / STUDY_DB_NAME) as conn:
        stored = [r[0] for r in conn.execute("SELECT run_dir FROM runs ORDER BY position")]
    conn.close()
    assert stored[0] == str(Path(elsewhere["run_dir"]).resolve())
    assert stored[1] == f"runs/{Path(inside['run_dir']).name}"
    moved = shutil.move(writer.path, tmp_path / "moved")  # a study folder can move: its own runs come along
    runs = StudyRecord(moved).runs()
    assert runs[0].run_dir == Path(elsewhere["run_dir"]).resolve()
    assert runs[1].run_dir == Path(moved) / "runs" / Path(inside["run_dir"]).name
    assert RunRecord(runs[1].run_dir).settings["seed"] == 4


def test_resume_skips_done_keys_and_continues_positions(tmp_path: Path) -> None:
    keys = [{"seed": s} for s in range(4)]
    writer = StudyWriter.create(tmp_path, "baseline", {"seeds": "0-3"}, total=4, study_id="base")
    for i, key in enumerate(keys[:2]):
        writer.add_run(_child(writer.runs_dir, i)["run_dir"], key, summary={"status": "done"})
        writer.set_progress(i + 1)
    writer.close()  # the process stops here without finishing
    assert StudyRecord(writer.path).status == "interrupted"

    resumed = StudyWriter.resume(writer.path)
    assert resumed.done_keys() == {canonical_key(k) for k in keys[:2]}
    made = []
    for key in keys:
        if canonical_key(key) in resumed.done_keys():
            continue
        made.append(resumed.add_run(_child(resumed.runs_dir, key["seed"])["run_dir"], key))
    resumed.set_progress(4)
    resumed.finish("done", result={"summary": "baseline of 4 runs"})
    assert made == [2, 3]
    record = StudyRecord(writer.path)
    assert [r.key for r in record.runs()] == keys and record.progress == {"done": 4, "total": 4}
    assert [e.kind for e in record.events()] == ["resumed"]

    with pytest.raises(RecordError, match="already done"):
        StudyWriter.resume(writer.path)
    again = StudyWriter.resume(writer.path, force=True)
    assert StudyRecord(writer.path).status == "running"
    again.finish("cancelled")
    StudyWriter.resume(writer.path).close()  # a cancelled (or failed) study resumes without force


def test_dropped_writer_and_context_manager(tmp_path: Path) -> None:
    writer = StudyWriter.create(tmp_path, "replay", {"times": 5}, total=5, study_id="dropped")
    for i in range(3):
        writer.add_run(_child(writer.runs_dir, 9, run_id=f"r{i}")["run_dir"], {"replay": i}, role="replay")
    path = writer.path
    del writer
    gc.collect()
    record = StudyRecord(path)
    assert record.status == "interrupted" and not record.complete  # a dropped writer is a writer gone
    assert [r.position for r in record.runs()] == [0, 1, 2]
    assert all(r.run_dir.is_dir() for r in record.runs())

    with pytest.raises(ZeroDivisionError), StudyWriter.create(tmp_path, "bisect", {}, study_id="boom"):
        1 / 0  # noqa: B018
    failed = StudyRecord(tmp_path / "boom")
    assert failed.status == "failed" and failed.error == "ZeroDivisionError: division by zero"
    with pytest.raises(KeyboardInterrupt), StudyWriter.create(tmp_path, "bisect", {}, study_id="stop"):
        raise KeyboardInterrupt
    assert StudyRecord(tmp_path / "stop").status == "cancelled"
    with StudyWriter.create(tmp_path, "bisect", {}, study_id="fine") as ok:
        ok.set_result({"culprit": "unet.mid_block", "summary": "culprit unet.mid_block"})
    assert StudyRecord(tmp_path / "fine").status == "done"


KILL_SCRIPT = """
import sys, time
from ghostviewer.record import StudyWriter
study = StudyWriter.create(sys.argv[1], "sweep", {"seeds": "0-999"}, total=1000, study_id="victim")
for i in range(1000):
    (study.runs_dir / f"run-{i}").mkdir()
    study.add_run(study.runs_dir / f"run-{i}", {"seed": i}, summary={"status": "done", "verdict": {"label": "ok"}})
    study.set_progress(i + 1)
    print(i, flush=True)
    time.sleep(0.02)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_keeps_every_committed_child(tmp_path: Path) -> None:
    last, returncode = sigkill_after(KILL_SCRIPT, tmp_path, what="study writer")
    assert returncode == -signal.SIGKILL
    record = StudyRecord(tmp_path / "victim")
    assert record.status == "interrupted" and record.error is None
    positions = [r.position for r in record.runs()]
    assert positions[: last + 1] == list(range(last + 1)) and positions == list(range(len(positions)))
    assert record.progress["done"] >= last + 1 and record.progress["total"] == 1000
    resumed = StudyWriter.resume(record.path)  # and it picks up where it died
    assert len(resumed.done_keys()) == len(positions)
    resumed.finish("cancelled")


def _check(path: Path, match: str) -> None:
    with pytest.raises(RecordError, match=match) as info:
        StudyRecord(path)
    assert "\n" not in str(info.value)


def test_unreadable_folders_are_refused(tmp_path: Path) -> None:
    _check(tmp_path / "nowhere", "not a folder")
    (tmp_path / "empty").mkdir()
    _check(tmp_path / "empty", r"no study.sqlite")
    _check(Path(_child(tmp_path, 0, run_id="a-run")["run_dir"]), r"no study.sqlite")  # a run is not a study
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / STUDY_DB_NAME).write_bytes(b"this is not sqlite, " * 400)
    _check(garbage, "corrupt study database")
    with pytest.raises(RecordError):
        StudyWriter.resume(garbage)
    bare = tmp_path / "bare"
    bare.mkdir()
    sqlite3.connect(bare / STUDY_DB_NAME).close()
    _check(bare, "no meta table")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    writer = StudyWriter.create(tmp_path, "sweep", {}, study_id="future")
    writer.finish("failed", error="stopped")
    _set_meta(writer.path / STUDY_DB_NAME, "schema_version", 99)
    _check(writer.path, r"newer GhostViewer \(schema 99\)")
    with pytest.raises(RecordError, match="newer"):
        StudyWriter.resume(writer.path)
    assert list_studies(tmp_path) == []  # the history skips what it cannot read


def test_escaping_run_dir_is_refused(tmp_path: Path) -> None:
    writer = StudyWriter.create(tmp_path, "sweep", {}, study_id="sly")
    writer.add_run(writer.runs_dir / "r0", {"seed": 0})
    writer.finish("done")
    with sqlite3.connect(writer.path / STUDY_DB_NAME) as conn:
        conn.execute("UPDATE runs SET run_dir = '../../etc' WHERE position = 0")
    conn.close()
    with pytest.raises(RecordError, match="outside its folder"):
        StudyRecord(writer.path).runs()


def test_list_entries_mixes_runs_and_studies_newest_first(tmp_path: Path) -> None:
    old_run = Path(_child(tmp_path, 0, run_id="old-run")["run_dir"])
    study = StudyWriter.create(tmp_path, "replay", {"times": 2}, study_id="replay-mid")
    study.add_run(_child(study.runs_dir, 1)["run_dir"], {"replay": 0}, role="replay")
    study.finish("done", result={"summary": "reproduced 1/1"})
    new_run = Path(_child(tmp_path, 2, run_id="new-run")["run_dir"])
    stamps = {old_run / "run.sqlite": "2026-01-01T10:00:00.000+00:00",
              study.path / STUDY_DB_NAME: "2026-01-01T11:00:00.000+00:00",
              new_run / "run.sqlite": "2026-01-01T12:00:00.000+00:00"}
    for db, created in stamps.items():
        _set_meta(db, "created_at", created)
    entries = list_entries(tmp_path)
    assert [type(e).__name__ for e in entries] == ["RunRecord", "StudyRecord", "RunRecord"]
    assert [e.path.name for e in entries] == ["new-run", "replay-mid", "old-run"]
    assert [r.run_id for r in list_runs(tmp_path)] == ["new-run", "old-run"]  # the study is not a run
    assert [s.study_id for s in list_studies(tmp_path)] == ["replay-mid"]
    assert len(list_runs(study.runs_dir)) == 1  # its child lives inside it, out of the history

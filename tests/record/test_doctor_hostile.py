"""`ghostviewer doctor` on folders someone else made: links, records of a newer GhostViewer, a read-only disk."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.cli import main as cli_main
from ghostviewer.record import RunRecord, RunWriter, StepInfo
from ghostviewer.record.lock import LOCK_NAME


def _left_running(folder: Path) -> Path:
    """A run whose writer vanished without a lock file (as copied from elsewhere): doctor would mark it."""
    writer = RunWriter.create(folder, {"prompt": "p", "seed": 1, "steps": 3}, {})
    writer.add_step(StepInfo(0, 900.0, None, 0.01, None, None, None, "rss"), {"latents": np.zeros(4, np.float32)})
    path = writer.path
    (path / LOCK_NAME).unlink()
    return path


def _doctor(capsys, folder: Path) -> dict:
    assert cli_main(["doctor", str(folder), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _status(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return json.loads(conn.execute("SELECT value FROM meta WHERE key='status'").fetchone()[0])


def test_doctor_never_writes_through_a_linked_database(tmp_path: Path, capsys) -> None:
    elsewhere = _left_running(tmp_path / "elsewhere")
    runs = tmp_path / "runs"
    victim = runs / "victim"
    victim.mkdir(parents=True)
    (victim / "run.sqlite").symlink_to(elsewhere / "run.sqlite")
    report = _doctor(capsys, runs)
    assert report["linked"] == 1 and report["interrupted"] == 0
    assert _status(elsewhere / "run.sqlite") == "running"  # the database elsewhere is untouched


def test_doctor_leaves_a_record_of_a_newer_schema_alone(tmp_path: Path, capsys) -> None:
    run = _left_running(tmp_path)
    with sqlite3.connect(run / "run.sqlite") as conn:
        conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    report = _doctor(capsys, tmp_path)
    assert report["newer"] == 1 and report["interrupted"] == 0 and _status(run / "run.sqlite") == "running"


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True,
                    reason="root writes to read-only folders anyway")
def test_on_a_read_only_disk_healthy_records_are_ok_not_unreadable(tmp_path: Path, capsys) -> None:
    writer = RunWriter.create(tmp_path, {"prompt": "p", "seed": 1, "steps": 1}, {})
    writer.finish("done", 1.0)
    for path in [writer.path, *writer.path.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        report = _doctor(capsys, tmp_path)
        assert report["unreadable"] == 0 and RunRecord(writer.path).status == "done"
    finally:
        for path in [writer.path, *writer.path.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)


def test_a_finished_record_is_only_read(tmp_path: Path, capsys) -> None:
    writer = RunWriter.create(tmp_path, {"prompt": "p", "seed": 1, "steps": 1}, {})
    writer.finish("done", 1.0)
    copy = tmp_path / "copy"
    shutil.copytree(writer.path, copy / writer.path.name)
    before = (copy / writer.path.name / "run.sqlite").stat().st_mtime_ns
    report = _doctor(capsys, copy)
    assert report["runs"] == 1 and report["unreadable"] == 0
    assert (copy / writer.path.name / "run.sqlite").stat().st_mtime_ns == before

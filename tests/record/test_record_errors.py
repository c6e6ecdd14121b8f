"""Bad inputs to RunRecord raise RecordError with one clear line."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from ghostviewer.record import RecordError, RunRecord, RunWriter
from ghostviewer.record.schema import migrate


def _finished_run(tmp_path: Path) -> Path:
    writer = RunWriter.create(tmp_path, {"prompt": "x"}, {}, run_id="r")
    writer.finish("done", 0.0)
    return writer.path


def _check(path: Path, match: str) -> None:
    with pytest.raises(RecordError, match=match) as info:
        RunRecord(path)
    assert "\n" not in str(info.value)


def test_missing_and_empty(tmp_path: Path) -> None:
    _check(tmp_path / "nowhere", "not a folder")
    (tmp_path / "file.txt").write_text("hi")
    _check(tmp_path / "file.txt", "not a folder")
    (tmp_path / "empty").mkdir()
    _check(tmp_path / "empty", r"not a GhostViewer run \(no run.sqlite\)")


def test_random_bytes_database(tmp_path: Path) -> None:
    folder = tmp_path / "corrupt"
    folder.mkdir()
    (folder / "run.sqlite").write_bytes(os.urandom(8192))
    _check(folder, "corrupt run database")


def test_other_sqlite_database(tmp_path: Path) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    with sqlite3.connect(folder / "run.sqlite") as conn:
        conn.execute("CREATE TABLE t (x)")
    _check(folder, "not a GhostViewer run")


def test_newer_schema(tmp_path: Path) -> None:
    path = _finished_run(tmp_path)
    with sqlite3.connect(path / "run.sqlite") as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (json.dumps(99),))
    _check(path, r"run was written by a newer GhostViewer \(schema 99\)")
    conn = sqlite3.connect(path / "run.sqlite")
    try:
        with pytest.raises(RecordError, match="schema 99"):
            migrate(conn)
    finally:
        conn.close()


def test_missing_tensor_file_is_record_error(tmp_path: Path) -> None:
    import numpy as np

    writer = RunWriter.create(tmp_path, {}, {}, run_id="r")
    path = writer.save_tensors("initial_noise", {"a": np.zeros(2, np.float32)})
    writer.finish("done", 0.0)
    path.write_bytes(b"not safetensors")
    with pytest.raises(RecordError, match="unreadable tensor file"):
        RunRecord(writer.path).tensors("initial_noise")


def test_record_package_is_torch_and_qt_free() -> None:
    import subprocess
    import sys

    code = "import sys, ghostviewer.record; print(sorted({'torch', 'PySide6'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

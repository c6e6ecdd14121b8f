"""Records edited by hand or damaged: wrong-typed settings and corrupted statistics are usage errors (exit 2, one
line) for every command that reads them, never "internal error"."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.cli import main
from ghostviewer.record import RunWriter, StepInfo
from ghostviewer.record.types import StatRow


def _run(folder: Path) -> Path:
    writer = RunWriter.create(folder, {"prompt": "p", "seed": 1, "steps": 1, "bypass": [], "faults": []}, {})
    writer.add_stats([StatRow("denoise", 0, "unet.mid_block", 0, 0, (1, 4), "float32", 0.0, 1.0, 0.5, 0.1, 1.0, 0, 0)])
    writer.add_step(StepInfo(0, 900.0, None, 0.01, None, None, None, "rss"), {"latents": np.zeros(4, np.float32)})
    writer.finish("done", 1.0)
    return writer.path


def _edit(run: Path, settings: dict | None = None, sql: str | None = None) -> None:
    with sqlite3.connect(run / "run.sqlite") as conn:
        if settings is not None:
            stored = json.loads(conn.execute("SELECT value FROM meta WHERE key='settings'").fetchone()[0])
            conn.execute("UPDATE meta SET value=? WHERE key='settings'", (json.dumps({**stored, **settings}),))
        if sql:
            conn.execute(sql)


def test_a_corrupted_phase_name_is_a_damaged_record(tmp_path: Path, capsys) -> None:
    good = _run(tmp_path / "a")
    bad = tmp_path / "b"
    shutil.copytree(good, bad)
    _edit(bad, sql="UPDATE stats SET phase='zzz'")
    code = main(["compare", str(good), str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "damaged" in err and "internal error" not in err


def test_a_bypass_that_is_a_number_is_refused_by_export(tmp_path: Path, capsys) -> None:
    run = _run(tmp_path)
    _edit(run, settings={"bypass": [5]})
    assert main(["export", str(run), "-o", str(tmp_path / "x.zip")]) == 2
    err = capsys.readouterr().err
    assert "records settings that are not valid" in err and "not 5" in err


def test_a_fifo_where_a_tensors_file_is_listed_never_blocks_a_reader(tmp_path: Path) -> None:
    import os
    import threading

    from ghostviewer.record import RecordError, RunRecord

    run = _run(tmp_path)
    (run / "tensors").mkdir(exist_ok=True)
    os.mkfifo(run / "tensors" / "step_0009.safetensors")
    with sqlite3.connect(run / "run.sqlite") as conn:
        conn.execute("INSERT INTO files (name, kind, relpath, step) VALUES "
                     "('step_0009', 'tensors', 'tensors/step_0009.safetensors', 9)")
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            RunRecord(run).tensors("step_0009")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the outcome is the test's
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert outcome, "reading the record blocked on a FIFO"
    assert isinstance(outcome[0], RecordError) and "not a regular file" in str(outcome[0])


def test_a_sweep_study_listing_a_run_elsewhere_is_refused(tmp_path: Path, capsys) -> None:
    from ghostviewer.record import RecordError, StudyRecord, StudyWriter

    outside = _run(tmp_path / "elsewhere")
    study = StudyWriter.create(tmp_path / "runs", "sweep", {"items": [{"prompt": "p"}], "seeds": "1", "settings": {}},
                               total=1)
    inside = _run(study.runs_dir)
    study.add_run(inside, {"prompt": "p", "seed": 1}, summary={"status": "done"})
    study.finish("done")
    with sqlite3.connect(study.path / "study.sqlite") as conn:
        conn.execute("UPDATE runs SET run_dir = ?", (str(outside),))
    with pytest.raises(RecordError, match="lists a run outside its folder"):
        StudyRecord(study.path).runs()
    assert main(["sweep", "--resume", str(study.path)]) == 2
    assert "outside its folder" in capsys.readouterr().err

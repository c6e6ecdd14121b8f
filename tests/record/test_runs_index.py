"""The runs index (record/runs_index.py) on real records: kept up to date by the writer, read again where stale,
made again when missing, damaged or foreign, never followed through a link, never trusted to point outside a run."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.record import RunWriter
from ghostviewer.record import runs_index as ri
from ghostviewer.record.runs_index import INDEX_NAME, RunsIndex, ensure, list_rows, read_row


def _run(folder: Path, run_id: str, label: str = "ok", finish: bool = True, **settings: object) -> RunWriter:
    writer = RunWriter.create(folder, {"prompt": f"prompt of {run_id}", "seed": 3, "steps": 2, **settings},
                              {"device": "cpu"}, run_id=run_id)
    writer.save_image("final", np.zeros((8, 8, 3), np.float32))
    anomaly = None if label == "ok" else {"phase": "denoise", "step": 1, "module": "unet.mid_block", "kind": "nan"}
    writer.set_verdict({"label": label, "scores": {}}, anomaly)
    if finish:
        writer.finish("done", 0.1)
    return writer


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The run folders whose own records list_rows opens (read_row, spied on)."""
    seen: list[Path] = []
    real = ri.read_row

    def spy(folder: Path) -> ri.RunRow:
        seen.append(Path(folder))
        return real(folder)

    monkeypatch.setattr(ri, "read_row", spy)
    return seen


def _index_names(folder: Path) -> set[str]:
    with RunsIndex(folder) as index:
        return set(index.rows())


def test_a_small_folder_gets_no_index(tmp_path: Path) -> None:
    _run(tmp_path, "run-a")
    rows, _, _ = list_rows(tmp_path)
    assert [f.name for f, _, _ in rows] == ["run-a"] and sorted(p.name for p in tmp_path.iterdir()) == ["run-a"]


def test_the_writer_lists_its_run_and_listing_opens_no_record(tmp_path: Path, opened: list[Path]) -> None:
    ensure(tmp_path)  # a large folder's first listing made it
    _run(tmp_path, "run-a", faults=["nan-latents"])
    _run(tmp_path, "run-b", label="nan", bypass=["unet.mid_block"])
    assert _index_names(tmp_path) == {"run-a", "run-b"}
    rows, unreadable, left = list_rows(tmp_path)
    assert opened == [] and unreadable == [] and left == []
    by_name = {folder.name: row for folder, _, row in rows}
    for name in ("run-a", "run-b"):
        assert by_name[name] == read_row(tmp_path / name)  # what the record says, without opening it
    assert by_name["run-b"].verdict == "nan" and by_name["run-b"].first_anomaly["kind"] == "nan"
    assert by_name["run-a"].settings == {"faults": ["nan-latents"]}
    assert by_name["run-a"].image_path(tmp_path / "run-a") == str(tmp_path / "run-a" / "images" / "final.png")


def test_a_changed_run_is_read_again_and_written_back(tmp_path: Path, opened: list[Path]) -> None:
    ensure(tmp_path)
    _run(tmp_path, "run-a")
    with sqlite3.connect(tmp_path / "run-a" / "run.sqlite") as conn:  # doctor, an annexed image: the record changes
        conn.execute("UPDATE meta SET value = ? WHERE key = 'verdict'", (json.dumps({"label": "blank"}),))
    conn.close()
    rows, _, _ = list_rows(tmp_path)
    assert opened == [tmp_path / "run-a"] and rows[0][2].verdict == "blank"
    list_rows(tmp_path)
    assert opened == [tmp_path / "run-a"]  # written back: the next listing reads the index only


def test_a_run_not_finished_reads_running_then_interrupted(tmp_path: Path) -> None:
    writer = _run(tmp_path, "run-live", finish=False)
    rows, _, _ = list_rows(tmp_path)
    assert rows[0][2].status == "running" and rows[0][2].live_status(rows[0][0]) == "running"
    writer._close(fold=False)  # its process gone without a final status: the lock is let go
    rows, _, _ = list_rows(tmp_path)
    assert rows[0][2].live_status(rows[0][0]) == "interrupted"


@pytest.mark.parametrize("damage", ["missing", "garbage", "foreign", "older"])
def test_an_index_missing_damaged_foreign_or_older_is_made_again(tmp_path: Path, damage: str,
                                                                  opened: list[Path]) -> None:
    _run(tmp_path, "run-a")
    _run(tmp_path, "run-b")
    index = tmp_path / INDEX_NAME
    for name in ri.INDEX_FILES:
        (tmp_path / name).unlink(missing_ok=True)
    if damage == "garbage":
        index.write_bytes(b"not a database at all" * 100)
    elif damage in ("foreign", "older"):
        with sqlite3.connect(index) as conn:
            if damage == "foreign":
                conn.execute("CREATE TABLE photos (id INTEGER)")
            else:
                conn.execute(ri._TABLE)
                conn.execute("PRAGMA user_version = 1")
        conn.close()
    rows, unreadable, _ = list_rows(tmp_path, create=damage == "missing")
    assert sorted(f.name for f, _, _ in rows) == ["run-a", "run-b"] and unreadable == []
    assert len(opened) == 2 and _index_names(tmp_path) == {"run-a", "run-b"}


def test_an_index_of_a_newer_version_is_left_alone(tmp_path: Path) -> None:
    _run(tmp_path, "run-a")
    for name in ri.INDEX_FILES:
        (tmp_path / name).unlink(missing_ok=True)
    with sqlite3.connect(tmp_path / INDEX_NAME) as conn:
        conn.execute("CREATE TABLE runs (name TEXT PRIMARY KEY, stamp TEXT NOT NULL, row TEXT NOT NULL)")
        conn.execute(f"PRAGMA user_version = {ri.INDEX_VERSION + 1}")
    conn.close()
    before = (tmp_path / INDEX_NAME).read_bytes()
    rows, _, _ = list_rows(tmp_path)
    assert [f.name for f, _, _ in rows] == ["run-a"]
    assert (tmp_path / INDEX_NAME).read_bytes() == before


def test_a_link_in_place_of_the_index_is_never_followed(tmp_path: Path) -> None:
    runs, outside = tmp_path / "runs", tmp_path / "outside"
    runs.mkdir()
    outside.mkdir()
    target = outside / "precious.sqlite"
    target.write_bytes(b"someone else's file")
    os.symlink(target, runs / INDEX_NAME)
    _run(runs, "run-a")
    rows, _, _ = list_rows(runs)
    assert [f.name for f, _, _ in rows] == ["run-a"]
    assert target.read_bytes() == b"someone else's file" and (runs / INDEX_NAME).is_symlink()


def test_a_tampered_row_cannot_point_outside_its_run(tmp_path: Path) -> None:
    ensure(tmp_path)
    _run(tmp_path, "run-a")
    with RunsIndex(tmp_path) as index:
        (st, text), = index.rows().values()
        row = json.loads(text)
        for image in ("../../etc/passwd", "/etc/passwd", "images/../../x.png"):
            row[ri._NAMES.index("image")] = image  # the row's values in RunRow's order
            index._conn.execute("UPDATE runs SET row = ?", (json.dumps(row),))
            (folder, _, listed), = list_rows(tmp_path)[0]
            assert listed.image_path(folder) is None
        index._conn.execute("UPDATE runs SET row = ?", ("[1, 2",))  # not a row at all: read from the record
    (_, _, listed), = list_rows(tmp_path)[0]
    assert listed.image == "images/final.png"


def test_listing_many_scripted_copies_reads_each_record_once(tmp_path: Path, opened: list[Path]) -> None:
    template = _run(tmp_path / "template", "run-0000").path
    runs = tmp_path / "runs"
    runs.mkdir()
    for k in range(120):  # copies made by hand (a folder synced in): not in the index until listed once
        shutil.copytree(template, runs / f"run-{k:04d}")
    rows, unreadable, left = list_rows(runs, budget=50, create=True)
    assert len(rows) == 50 and len(left) == 70 and unreadable == []
    rows, _, left = list_rows(runs)
    assert len(rows) == 120 and left == [] and len(opened) == 120
    list_rows(runs)
    assert len(opened) == 120


def test_the_history_lists_the_same_rows_from_the_index(tmp_path: Path) -> None:
    from ghostviewer.gui.models.history_model import read_entry, scan

    _run(tmp_path, "20261201-000001-aaaaaa", faults=["nan-latents"])
    _run(tmp_path, "20261201-000002-bbbbbb", label="nan")
    rows, _, complete = scan(tmp_path, {})
    assert complete and [r.run_id for r in rows] == ["20261201-000002-bbbbbb", "20261201-000001-aaaaaa"]
    for row in rows:
        assert row == read_entry(Path(row.path))
    assert rows[1].changes == ("ghost: nan-latents",) and rows[0].verdict == "nan"


def test_a_row_written_as_an_object_before_is_read_and_written_again_as_an_array(tmp_path: Path,
                                                                                 opened: list[Path]) -> None:
    """Rows are JSON arrays in RunRow's order (a third of the parse of objects, 10,000 rows listed); an index
    whose rows are objects (written before) lists the same rows, opens no record, and holds arrays afterwards."""
    ensure(tmp_path)
    _run(tmp_path, "run-a", label="nan")
    with RunsIndex(tmp_path) as index:
        (st, text), = index.rows().values()
        assert isinstance(json.loads(text), list)
        as_object = json.dumps(dict(zip(ri._NAMES, json.loads(text), strict=True)))
        index._conn.execute("UPDATE runs SET row = ?", (as_object,))
    (_, _, listed), = list_rows(tmp_path)[0]
    assert (listed.verdict, listed.prompt, listed.first_anomaly["kind"]) == ("nan", "prompt of run-a", "nan")
    assert opened == []
    with RunsIndex(tmp_path) as index:
        (st_after, text_after), = index.rows().values()
    assert st_after == st and json.loads(text_after) == json.loads(text)
    assert list_rows(tmp_path)[0][0][2] == listed and opened == []

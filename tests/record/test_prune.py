"""Pruning a runs folder (record/prune.py) on real records in tmp_path: by age, by verdict, keeping anomalies and the
newest N; a live writer's run kept; a watch study's kept calls removed and its rows kept as summary rows; a study
removed whole and a run it refers to kept while it stays; strays and links named and left, links never followed."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.record import RecordError, RunWriter, StudyRecord, StudyWriter
from ghostviewer.record.prune import folder_bytes, parse_age, prune
from ghostviewer.record.runs_index import RunsIndex, ensure, list_rows
from ghostviewer.record.study_reader import SUMMARY_ROLE, not_kept_reason

NAN = {"phase": "denoise", "step": 1, "module": "unet.mid_block", "kind": "nan"}


def _age(folder: Path, days: float, db: str = "run.sqlite") -> None:
    """Make a record `days` old (its created_at, as if written then)."""
    when = (datetime.now().astimezone() - timedelta(days=days)).isoformat(timespec="microseconds")
    with sqlite3.connect(folder / db) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'created_at'", (json.dumps(when),))
    conn.close()


def _run(folder: Path, run_id: str, label: str = "ok", anomaly: dict | None = None, days: float = 0.0,
         status: str = "done") -> Path:
    writer = RunWriter.create(folder, {"prompt": "a red circle", "seed": 1, "steps": 2}, {"device": "cpu"},
                              run_id=run_id)
    writer.save_tensors("latents", {"x": np.ones((4, 8, 8), np.float32)})
    writer.save_image("final", np.zeros((8, 8, 3), np.float32))
    if status == "done":
        writer.set_verdict({"label": label, "scores": {}}, anomaly)
    writer.finish(status, 0.1, error="boom" if status == "failed" else None)
    if days:
        _age(writer.path, days)
    return writer.path


def _copies(template: Path, folder: Path, ages: list[float]) -> list[Path]:
    """Scripted copies of a real run, each with its own id and age (what a long-running service leaves)."""
    made = []
    for k, days in enumerate(ages):
        target = folder / f"copy-{k:04d}"
        shutil.copytree(template, target)
        with sqlite3.connect(target / "run.sqlite") as conn:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'run_id'", (json.dumps(target.name),))
        conn.close()
        _age(target, days)
        made.append(target)
    return made


def _names(result: dict) -> set[str]:
    return {Path(r["path"]).name for r in result["removed"]}


def test_older_than_removes_old_runs_and_frees_their_bytes(tmp_path: Path) -> None:
    ensure(tmp_path)  # a folder with a runs index (a large one's)
    old = [_run(tmp_path, f"old-{k}", days=10) for k in range(3)]
    new = [_run(tmp_path, f"new-{k}") for k in range(2)]
    sizes = sum(folder_bytes(p) for p in old)
    result = prune(tmp_path, older_than="7d")
    assert _names(result) == {"old-0", "old-1", "old-2"} and result["bytes_freed"] == sizes > 0
    assert result["kept"] == 2 and result["left"] == [] and not result["dry_run"]
    assert not any(p.exists() for p in old) and all(p.is_dir() for p in new)
    with RunsIndex(tmp_path) as index:
        assert set(index.rows()) == {"new-0", "new-1"}  # the index forgets them too
    assert prune(tmp_path, older_than=7)["removed"] == []  # a bare number is days


def test_dry_run_says_the_same_and_removes_nothing(tmp_path: Path) -> None:
    runs = [_run(tmp_path, f"run-{k}", days=30) for k in range(3)]
    before = {p: folder_bytes(p) for p in runs}
    dry = prune(tmp_path, older_than="2w", dry_run=True)
    assert dry["dry_run"] and _names(dry) == {"run-0", "run-1", "run-2"} and dry["bytes_freed"] == sum(before.values())
    assert all(p.is_dir() and folder_bytes(p) == size for p, size in before.items())
    assert _names(prune(tmp_path, older_than="2w")) == _names(dry)


def test_by_verdict_keeping_anomalies(tmp_path: Path) -> None:
    _run(tmp_path, "healthy")
    _run(tmp_path, "drifted", anomaly={**NAN, "kind": "drift"})  # its image passed, something inside did not
    _run(tmp_path, "black", label="blank")
    _run(tmp_path, "crashed", status="failed")
    assert _names(prune(tmp_path, verdict="ok", keep_anomalies=True)) == {"healthy"}
    assert _names(prune(tmp_path, verdict=["failed", "blank"])) == {"black", "crashed"}
    assert _names(prune(tmp_path, verdict="ok")) == {"drifted"}


def test_keep_last_on_many_scripted_copies(tmp_path: Path) -> None:
    template = _run(tmp_path / "template", "template")
    runs = tmp_path / "runs"
    runs.mkdir()
    copies = _copies(template, runs, [float(k) for k in range(60)])  # copy-0000 the newest
    result = prune(runs, keep_last=5, keep_anomalies=True)
    assert len(result["removed"]) == 55 and result["kept"] == 5
    assert sorted(p.name for p in runs.iterdir() if p.is_dir()) == [p.name for p in copies[:5]]
    assert [f.name for f, _, _ in list_rows(runs)[0]] == [p.name for p in reversed(copies[:5])]


def test_a_run_being_written_is_kept(tmp_path: Path) -> None:
    done = _run(tmp_path, "finished")
    live = RunWriter.create(tmp_path, {"prompt": "p", "seed": 1, "steps": 2}, {}, run_id="live")
    _age(live.path, 30)  # old, and still being written (a long run, a stuck service): never removed
    result = prune(tmp_path, older_than="1s", keep_last=0, now=time.time() + 10)
    assert _names(result) == {"finished"} and not done.exists()
    assert {"path": str(live.path), "reason": "being written (left alone)"} in result["left"]
    live.finish("done", 0.1)  # its writer never noticed
    assert (live.path / "run.sqlite").is_file()


def test_strays_and_links_are_named_left_and_never_followed(tmp_path: Path) -> None:
    runs, outside = tmp_path / "runs", tmp_path / "outside"
    runs.mkdir()
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("not GhostViewer's")
    elsewhere = _run(outside, "someone-elses-run", days=30)
    run = _run(runs, "old-run", days=30)
    os.symlink(secret, run / "images" / "linked.png")  # a link inside a run: removed as a link, never followed
    os.symlink(outside, run / "tensors" / "linked-folder")
    os.symlink(elsewhere, runs / "linked-run")  # a link in the runs folder: left
    (runs / "notes.txt").write_text("my notes")
    (runs / "stuff").mkdir()
    (runs / "logs").mkdir()
    result = prune(runs, older_than="1d")
    assert _names(result) == {"old-run"} and not run.exists()
    assert secret.read_text() == "not GhostViewer's" and (elsewhere / "run.sqlite").is_file()
    left = {Path(item["path"]).name: item["reason"] for item in result["left"]}
    assert left == {"linked-run": "a link (never followed)", "notes.txt": "not a GhostViewer record",
                    "stuff": "not a GhostViewer record", "logs": "the CLI's log folder (not pruned)"}
    assert (runs / "linked-run").is_symlink() and (runs / "notes.txt").is_file() and (runs / "stuff").is_dir()


def test_an_unreadable_record_is_named_and_left(tmp_path: Path) -> None:
    broken = tmp_path / "broken-run"
    broken.mkdir()
    (broken / "run.sqlite").write_bytes(b"not a database" * 100)
    result = prune(tmp_path, keep_last=0)
    assert result["removed"] == [] and broken.is_dir()
    assert result["left"][0]["path"] == str(broken) and result["left"][0]["reason"].startswith("unreadable (")


def _watch_study(runs: Path, days: float) -> tuple[Path, list[Path]]:
    study = StudyWriter.create(runs, "watch", {"program": "app.py --port 8000"})
    kept = []
    for call, label in enumerate(["ok", "nan", "ok"]):
        path = _run(study.runs_dir, f"call-{call:06d}", label=label, anomaly=NAN if label == "nan" else None,
                    days=days)
        study.add_run(path, {"call": call}, summary={"status": "done", "verdict": {"label": label}})
        kept.append(path)
    for call in (3, 4):
        study.add_run(study.runs_dir / f"call-{call:06d}", {"call": call}, role=SUMMARY_ROLE,
                      summary={"status": "done", "verdict": {"label": "ok"}}, note="not kept (healthy)")
    study.set_result({"summary": "1/5 failed", "calls": 5, "failed": 1, "kept": 3})
    study.finish("done")
    return study.path, kept


def test_a_watch_study_keeps_its_rows_and_loses_its_kept_calls(tmp_path: Path) -> None:
    study, (first, bad, third) = _watch_study(tmp_path, days=10)
    result = prune(tmp_path, older_than="7d", keep_anomalies=True)
    assert _names(result) == {first.name, third.name} and {r["kind"] for r in result["removed"]} == {"watched call"}
    assert result["studies_updated"] == [str(study)] and study.is_dir() and bad.is_dir()
    record = StudyRecord(study)
    rows = record.runs()
    assert len(rows) == 5 and [r.run_dir.name for r in record.kept_runs()] == [bad.name]
    pruned = [r for r in rows if r.run_dir in (first, third)]
    assert all(r.role == SUMMARY_ROLE and r.note.startswith("not kept (pruned ") for r in pruned)
    assert record.result["kept"] == 1 and record.result["calls"] == 5  # the calls it watched stay counted
    assert "pruned" in not_kept_reason(first)
    assert [e.kind for e in record.events()][-1] == "pruned"


def test_a_study_goes_whole_and_a_run_it_refers_to_stays_while_it_does(tmp_path: Path) -> None:
    original = _run(tmp_path, "original", days=30)
    study = StudyWriter.create(tmp_path, "replay", {"run": str(original)})
    study.add_run(original, {"replay": 0}, role="original")
    study.add_run(_run(study.runs_dir, "replay-1"), {"replay": 1})
    study.finish("done")
    result = prune(tmp_path, older_than="7d")
    assert result["removed"] == [] and original.is_dir()
    assert result["left"] == [{"path": str(original), "reason": f"referenced by replay study {study.study_id} (kept)"}]
    _age(study.path, 30, "study.sqlite")
    result = prune(tmp_path, older_than="7d")
    assert _names(result) == {"original", study.study_id} and not study.path.exists()
    assert {r["kind"] for r in result["removed"]} == {"run", "study"}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "say what to remove"),
    ({"keep_anomalies": True}, "say what to remove"),
    ({"older_than": "3x"}, "takes an age such as"),
    ({"older_than": -1}, "must not be negative"),
    ({"verdict": "okay"}, "unknown verdict 'okay'"),
    ({"verdict": ","}, "needs a verdict"),
    ({"keep_last": -2}, "--keep-last takes a number"),
])
def test_bad_input_is_refused_in_one_line(tmp_path: Path, kwargs: dict, message: str) -> None:
    run = _run(tmp_path, "run", days=30)
    with pytest.raises(RecordError, match=message) as info:
        prune(tmp_path, **kwargs)
    assert "\n" not in str(info.value) and run.is_dir()


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="not a runs folder"):
        prune(tmp_path / "nope", older_than="1d")
    assert parse_age("90s") == 90 and parse_age("2w") == 14 * 86400 and parse_age("1.5h") == 5400

"""A pruned record goes whole or not at all (record/prune.py): a record with a folder in it this user may not change
stays untouched and readable, and `left` says why (a dry run says the same); a record that cannot be deleted whole
once it is renamed away is never listed as a half record, and the next prune names what is left. Root is refused
too: the folder is made immutable (chattr +i) where the tests run as root, read-only otherwise."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.record import RunRecord, RunWriter, list_runs
from ghostviewer.record.prune import PRUNING, prune


def _run(folder: Path, run_id: str) -> Path:
    writer = RunWriter.create(folder, {"prompt": "a red circle", "seed": 1, "steps": 2}, {"device": "cpu"},
                              run_id=run_id)
    writer.save_tensors("latents", {"x": np.ones((4, 8, 8), np.float32)})
    writer.save_image("final", np.zeros((8, 8, 3), np.float32))
    writer.set_verdict({"label": "ok", "scores": {}}, None)
    writer.finish("done", 0.1)
    return writer.path


@pytest.fixture
def frozen() -> Iterator[Callable[[Path], None]]:
    """freeze(path): make path unchangeable by this user (root included); undone after the test."""
    undo: list[Callable[[], None]] = []

    def freeze(path: Path) -> None:
        if os.geteuid() == 0:
            if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
                pytest.skip("needs chattr +i (immutable files) to refuse root")
            undo.append(lambda: subprocess.run(["chattr", "-i", str(path)], check=False))
        elif path.is_dir():
            mode = path.stat().st_mode
            os.chmod(path, 0o555)
            undo.append(lambda: os.chmod(path, mode))
        else:
            pytest.skip("only root can be refused the removal of a file in a folder it may change")

    yield freeze
    for step in reversed(undo):
        step()


def test_a_record_with_a_folder_that_may_not_change_stays_whole(tmp_path: Path, frozen) -> None:  # noqa: ANN001
    kept, other = _run(tmp_path, "kept"), _run(tmp_path, "other")
    images = next(p for p in kept.iterdir() if p.is_dir())  # the record's images folder
    frozen(images)
    dry = prune(tmp_path, keep_last=0, dry_run=True)
    result = prune(tmp_path, keep_last=0)
    for outcome in (dry, result):
        (left,) = [entry for entry in outcome["left"] if entry["path"] == str(kept)]
        assert left["reason"].startswith("cannot be removed whole:") and images.name in left["reason"]
    assert [r["path"] for r in result["removed"]] == [str(other)] and not other.exists()
    assert RunRecord(kept).status == "done" and RunRecord(kept).image_path("final").is_file()  # untouched, readable
    assert [r.path for r in list_runs(tmp_path)] == [kept]


def test_a_runs_folder_that_may_not_change_removes_nothing(tmp_path: Path, frozen) -> None:  # noqa: ANN001
    runs = tmp_path / "runs"
    run = _run(runs, "run")
    frozen(runs)
    result = prune(runs, keep_last=0)
    assert result["removed"] == [] and (run / "run.sqlite").is_file()
    assert "may not be changed" in result["left"][0]["reason"]


def test_what_a_failed_delete_leaves_is_hidden_and_named(tmp_path: Path, frozen) -> None:  # noqa: ANN001
    run = _run(tmp_path, "half")
    image = RunRecord(run).image_path("final")
    frozen(image)  # the folders may change, the file may not: found only once the delete is under way
    result = prune(tmp_path, keep_last=0)
    hidden = tmp_path / f"{PRUNING}half"
    assert result["removed"] == [] and not run.exists() and hidden.is_dir()
    assert "could not be deleted whole" in result["left"][0]["reason"]
    assert not (hidden / "run.sqlite").exists()  # the database went first: no half record to list
    assert list_runs(tmp_path) == []
    again = prune(tmp_path, keep_last=0)
    assert again["left"] == [{"path": str(hidden), "reason": "what a prune could not delete whole (not a record): "
                                                             "delete it by hand"}]

"""Where baselines lie and how a run's record names its own: folders in order, one read per file version."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.analysis.baseline_file import save_baseline
from ghostviewer.analysis.baseline_store import (
    BASELINES_FOLDER,
    SHIPPED_BASELINES,
    baseline_folders,
    channel_means_tensors,
    find_baseline_file,
    recorded_baseline_key,
    recorded_channel_means,
    run_baseline,
    runs_dir_folders,
)
from ghostviewer.analysis.envelope import BaselineError
from ghostviewer.record import Event, RunRecord, RunWriter
from tests.analysis.records import baseline_for, pipeline_rows, write_run


def test_folders_for_a_new_run_and_for_a_recorded_one(tmp_path: Path) -> None:
    assert runs_dir_folders(tmp_path) == [tmp_path / BASELINES_FOLDER, SHIPPED_BASELINES]
    assert runs_dir_folders(None) == [SHIPPED_BASELINES]
    run = tmp_path / "runs" / "study" / "runs" / "run-1"
    run.mkdir(parents=True)
    root = tmp_path.resolve()
    assert baseline_folders(run) == [root / "runs" / "study" / "runs" / BASELINES_FOLDER,
                                     root / "runs" / "study" / BASELINES_FOLDER, root / "runs" / BASELINES_FOLDER,
                                     SHIPPED_BASELINES]


def test_find_the_first_folder_that_has_the_key(tmp_path: Path) -> None:
    baseline = baseline_for(pipeline_rows(), steps=2)
    first, second = tmp_path / "a", tmp_path / "b"
    save_baseline(baseline, second / f"{baseline.key}.json")
    found = find_baseline_file(baseline.key, [first, second])
    assert found is not None and found[1] == second / f"{baseline.key}.json" and found[0].key == baseline.key
    assert find_baseline_file("0" * 16, [first, second]) is None


def test_a_file_is_read_again_only_when_it_changes(tmp_path: Path) -> None:
    baseline = baseline_for(pipeline_rows(), steps=2)
    path = save_baseline(baseline, tmp_path / f"{baseline.key}.json")
    once = find_baseline_file(baseline.key, [tmp_path])
    again = find_baseline_file(baseline.key, [tmp_path])
    assert once is not None and again is not None and once[0] is again[0]  # the same object: read once
    save_baseline(baseline_for(pipeline_rows(), steps=2, meta={"runs": 99}), path)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    changed = find_baseline_file(baseline.key, [tmp_path])
    assert changed is not None and changed[0] is not once[0] and changed[0].meta == {"runs": 99}


def test_a_renamed_file_is_refused_by_find_and_ignored_by_run_baseline(tmp_path: Path) -> None:
    baseline = baseline_for(pipeline_rows(), steps=2)
    wrong = "a" * 16
    save_baseline(baseline, tmp_path / "baselines" / f"{wrong}.json")
    with pytest.raises(BaselineError, match=f"holds the baseline {baseline.key}, not {wrong} \\(renamed\\?\\)"):
        find_baseline_file(wrong, [tmp_path / "baselines"])
    assert run_baseline(tmp_path / "run", wrong) is None


def test_run_baseline_from_a_run_folder(tmp_path: Path) -> None:
    baseline = baseline_for(pipeline_rows(), steps=2)
    save_baseline(baseline, tmp_path / "runs" / "baselines" / f"{baseline.key}.json")
    run = write_run(tmp_path / "runs", pipeline_rows())
    found = run_baseline(run, baseline.key)
    assert found is not None and found.key == baseline.key
    assert run_baseline(run, None) is None and run_baseline(run, "") is None and run_baseline(run, "b" * 16) is None


def test_the_key_a_run_was_judged_against() -> None:
    def event(kind: str, **data: object) -> Event:
        return Event(0.0, "info", kind, "", dict(data))

    key = "0123456789abcdef"
    assert recorded_baseline_key([event("phase"), event("baseline", baseline=key)]) == key
    assert recorded_baseline_key([event("baseline", baseline=None), event("baseline", baseline=key)]) == key
    assert recorded_baseline_key([event("baseline", baseline="../../etc/passwd")]) is None  # never a path
    assert recorded_baseline_key([event("baseline", baseline=key.upper())]) is None
    assert recorded_baseline_key([event("prompt_check", baseline=key)]) is None and recorded_baseline_key([]) is None


def test_channel_means_round_trip_through_a_record(tmp_path: Path) -> None:
    means = {("decode", "vae.decoder"): np.arange(4, dtype=np.float32),
             ("encode", "text_encoder"): np.ones(2, np.float32)}
    tensors = channel_means_tensors(means)
    assert set(tensors) == {"decode/vae.decoder", "encode/text_encoder"}
    writer = RunWriter.create(tmp_path, {"prompt": "x"}, {})
    writer.save_tensors("channel_means", tensors)
    writer.finish("done", 0.1)
    back = recorded_channel_means(RunRecord(writer.path))
    assert set(back) == set(means) and all(np.array_equal(back[k], means[k]) for k in means)
    assert recorded_channel_means(RunRecord(write_run(tmp_path, pipeline_rows()))) == {}  # a run without them

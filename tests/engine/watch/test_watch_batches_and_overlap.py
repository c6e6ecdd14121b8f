"""Watched calls on the real demo pipeline, what issue 24 left: a record kept under keep="anomalies" is the record
keep="all" makes, judged the same; a batch's samples each have their step latents and NaN/Inf counts; a call that
overlaps another on a second thread still records its initial noise, steps and x0; a healthy call leaves a summary
row only, and the baseline lookup kept between calls reads as a fresh one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch

import ghostviewer
from ghostviewer.engine.watch.samples import sample_nonfinite
from ghostviewer.record import RunRecord, StudyRecord
from tests.engine.overlapping_calls import call_overlapping
from tests.engine.test_runner import assert_no_leftovers

PROMPT = "a red circle on a blue background, top left"


def _call(pipe, steps: int = 4, seed: int = 3, **kwargs):
    return pipe(PROMPT, num_inference_steps=steps, generator=torch.Generator().manual_seed(seed), **kwargs)


def _poison_sample(sample: int, at: int = 1):
    def poison(_pipe, index, _timestep, tensors):
        if index == at:
            latents = tensors["latents"].clone()
            latents[sample] = float("nan")
            return {"latents": latents}
        return {}

    return poison


@pytest.fixture(scope="module")
def faulty_pair(demo_loaded, tmp_path_factory) -> tuple[dict, dict]:
    """The same faulty batch of 3 (sample 1 NaN from step 2 on), watched with keep="all" and keep="anomalies"."""
    runs = tmp_path_factory.mktemp("faulty")
    pipe = demo_loaded.pipe
    found = []
    for keep in ("all", "anomalies"):
        with ghostviewer.watch(pipe, runs_dir=runs / keep, keep=keep) as watcher:
            _call(pipe, num_images_per_prompt=3, output_type="np", callback_on_step_end=_poison_sample(1))
        (run,) = watcher.runs
        found.append(run)
    assert_no_leftovers(pipe)
    return found[0], found[1]


def test_keep_anomalies_judges_a_faulty_call_as_keep_all_does(faulty_pair) -> None:
    every, anomalies = faulty_pair
    for key in ("status", "verdict", "first_anomaly", "first_warning", "verdicts", "sample_anomalies"):
        assert every[key] == anomalies[key], key
    assert anomalies["kept"] and anomalies["verdict"]["label"] == "nan"
    first = anomalies["first_anomaly"]
    assert first["kind"] == "nan" and first["step"] == 1 and first["sample"] == 1 and first["samples"] == [1]
    assert first["module"] == "pipeline.callback_on_step_end"  # the caller's step callback made it


def test_the_record_kept_at_the_calls_end_is_the_whole_record(faulty_pair) -> None:
    a, b = (RunRecord(run["run_dir"]) for run in faulty_pair)
    assert a.status == b.status == "done"
    assert [s.index for s in a.steps()] == [s.index for s in b.steps()] == [0, 1, 2, 3]
    assert a.modules() == b.modules()
    key = [(r.phase, r.step, r.module, r.call, r.nan_count, r.inf_count) for r in a.stats()]
    assert key == [(r.phase, r.step, r.module, r.call, r.nan_count, r.inf_count) for r in b.stats()]
    assert sorted(f["name"] for f in a.files()) == sorted(f["name"] for f in b.files())
    assert [(e.kind, e.message) for e in a.events()] == [(e.kind, e.message) for e in b.events()]
    for step in range(4):
        ta, tb = a.step_tensors(step), b.step_tensors(step)
        assert ta.keys() == tb.keys()
        assert all(np.array_equal(ta[k], tb[k], equal_nan=True) for k in ta)
    assert a.call == b.call and a.verdicts == b.verdicts and a.sample_anomalies == b.sample_anomalies
    assert sample_nonfinite(a) == sample_nonfinite(b)


def test_a_batch_keeps_every_samples_step_latents_and_its_nan_counts(faulty_pair) -> None:
    record = RunRecord(faulty_pair[1]["run_dir"])
    for step in range(4):
        tensors = record.step_tensors(step)
        assert tensors["sample_latents"].shape == tensors["sample_x0"].shape == (3, 4, 16, 16)
        assert np.array_equal(tensors["sample_latents"][0], tensors["latents"])  # sample 0 is what it always was
        assert np.array_equal(tensors["sample_x0"][0], tensors["x0"])
        assert tensors["sample_preview"].shape == (3, *tensors["preview"].shape)  # each sample's picture per step
        assert np.array_equal(tensors["sample_preview"][0], tensors["preview"])
        bad = np.isnan(tensors["sample_latents"]).any(axis=(1, 2, 3)).tolist()
        assert bad == ([False, True, False] if step >= 1 else [False, False, False])
    counts = sample_nonfinite(record)
    assert counts and {c["sample"] for c in counts} == {1}  # samples 0 and 2 never had a NaN
    first = counts[0]  # the latents the caller's callback handed back at step 1, then the next step's U-Net
    assert (first["phase"], first["step"], first["module"]) == ("denoise", 1, "pipeline.callback_on_step_end")
    assert first["nan"] > 0
    mid = [c for c in counts if c["module"] == "unet.mid_block"]
    assert [c["step"] for c in mid] == [2, 3]  # per step, not only the first
    assert any(c["phase"] == "decode" for c in counts)  # through the VAE too
    assert any("image 2 of 3" in e.message for e in record.events(kind="sample"))


def test_a_record_without_the_table_reads_as_none(demo_loaded, runs_dir: Path) -> None:
    with ghostviewer.watch(demo_loaded.pipe, runs_dir=runs_dir) as watcher:
        _call(demo_loaded.pipe, steps=2, output_type="np")
    record = RunRecord(watcher.runs[0]["run_dir"])
    assert sample_nonfinite(record) == [] and "sample_latents" not in record.step_tensors(0)  # a batch of one


def test_an_overlapping_call_records_its_initial_noise_steps_and_x0(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        call_overlapping(pipe, watcher, _call, {"seed": 3, "output_type": "np"}, {"seed": 4, "output_type": "np"})
    assert_no_leftovers(pipe)
    runs = watcher.runs
    assert len(runs) == 2 and all(r["status"] == "done" for r in runs)
    sigma = float(pipe.scheduler.init_noise_sigma)
    for run, seed in zip(runs, (3, 4), strict=True):
        record = RunRecord(run["run_dir"])
        assert record.events(kind="concurrency")
        expected = torch.randn((1, 4, 16, 16), generator=torch.Generator().manual_seed(seed))[0].numpy() * sigma
        assert np.array_equal(record.tensors("initial_noise")["latents"], expected)  # its own, not the other's
        assert len(record.stats("scheduler.step", phase="denoise")) == 4
        assert len(record.stats("pipeline.prepare_latents")) == 1
        assert all("x0" in record.step_tensors(step) for step in range(4))
        assert record.environment["watched"]["probed"] is True
        assert record.tensors("channel_means")  # its own thread's encode/decode channel means


def test_a_healthy_call_leaves_a_summary_row_and_the_kept_lookup_reads_as_a_fresh_one(
        demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    with ghostviewer.watch(pipe, runs_dir=runs_dir, keep="anomalies") as watcher:
        _call(pipe, steps=20, seed=1, output_type="np")
        _call(pipe, steps=20, seed=2, output_type="np")
        _call(pipe, steps=2, output_type="np", latents=torch.full((1, 4, 16, 16), float("nan")))  # kept
        _call(pipe, steps=2, seed=5, output_type="np", latents=torch.full((1, 4, 16, 16), float("inf")))
    healthy = watcher.runs[:2]
    assert all(r["verdict"]["label"] == "ok" and not r["kept"] for r in healthy)
    assert healthy[0]["baseline"] == healthy[1]["baseline"] and healthy[0]["baseline"]["match"] == "exact"
    study = StudyRecord(watcher.summary()["study_dir"])
    assert sorted(p.name for p in study.runs_dir.iterdir()) == sorted(Path(r["run_dir"]).name for r in watcher.runs[2:])
    with sqlite3.connect(study.path / "study.sqlite") as conn:
        rows = conn.execute("SELECT key, role, run_dir, status, verdict, first_anomaly, note FROM runs "
                            "WHERE role = 'summary'").fetchall()
    assert len(rows) == 2 and all(sum(len(str(v or "")) for v in row) < 4096 for row in rows)
    bad = [RunRecord(r["run_dir"]) for r in watcher.runs[2:]]
    notes = [[e.message for e in record.events(kind="baseline")] for record in bad]
    assert notes[0] == notes[1] and notes[0] and "(asked for)" not in notes[0][0]  # 2 steps: no baseline judges it

"""The record written in batches: events only after their writes, steps committed as they end when they are slower
than the batch interval and in batches when faster, a write that fails fails the run (record closed), and the
traced-module list is cached per pipeline but follows a swapped module."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import torch

from ghostviewer.engine.run import record_buffer
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.engine.tracing.blocks import iter_modules
from ghostviewer.engine.tracing.tracer import traced_modules
from ghostviewer.record import RunRecord, RunWriter
from ghostviewer.record.disk import DiskFull
from ghostviewer.spec import RunSpec


def test_step_events_come_after_their_step_is_committed(demo_loaded, runs_dir: Path) -> None:
    seen: list[tuple[str, int]] = []

    def check(event: dict) -> None:
        if event["event"] == "step":
            steps = [s.index for s in RunRecord(event["run_dir"]).steps()]
            assert event["step"] in steps  # readable by the time the event arrives
            seen.append(("step", event["step"]))
        else:
            seen.append((event["event"], -1))

    execute_run(demo_loaded, RunSpec(prompt="a red circle on a blue background", steps=5), runs_dir,
                on_progress=check)
    assert seen == [("started", -1), *[("step", i) for i in range(5)], ("finished", -1)]


def _steps_on_disk_mid_run(demo_loaded, runs_dir: Path, flight: bool) -> tuple[list[int] | None, dict]:
    """The steps a reader of the record sees while step 4 computes (None: no record yet), and the run's summary."""
    seen: list[int | None] = []
    calls = iter(range(10**6))

    def peek(*_args) -> None:  # noqa: ANN002
        if next(calls) == 4:
            folders = list(runs_dir.iterdir()) if runs_dir.exists() else []
            seen.append([s.index for s in RunRecord(folders[0]).steps()] if folders else None)

    handle = demo_loaded.pipe.unet.register_forward_hook(peek)
    try:
        result = execute_run(demo_loaded, RunSpec(prompt="a red circle on a blue background", steps=6, seed=2,
                                                      faults=("fp16-vae-overflow",)), runs_dir, flight=flight)
    finally:
        handle.remove()
    return seen[0], result


def test_steps_slower_than_the_batch_interval_are_committed_as_they_end_faster_ones_in_batches(
        demo_loaded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_buffer, "FLUSH_EVERY_S", 0.0)  # every step is slower than that
    each, _ = _steps_on_disk_mid_run(demo_loaded, tmp_path / "each", True)
    assert each == [0, 1, 2, 3]
    monkeypatch.setattr(record_buffer, "FLUSH_EVERY_S", 3600.0)
    batched, result = _steps_on_disk_mid_run(demo_loaded, tmp_path / "batched", True)
    assert batched == []  # the record is there from the initial latents on; its steps come with the next batch
    assert [s.index for s in RunRecord(result["run_dir"]).steps()] == list(range(6))


def test_a_held_record_is_written_when_the_run_ends_and_equals_the_flight_record(
        demo_loaded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_buffer, "FLUSH_EVERY_S", 0.0)
    flight_seen, flight = _steps_on_disk_mid_run(demo_loaded, tmp_path / "flight", True)
    held_seen, held = _steps_on_disk_mid_run(demo_loaded, tmp_path / "held", False)
    assert flight_seen and held_seen is None  # the flight recorder commits as it goes; a held run has no record yet
    assert held["verdict"] == flight["verdict"] and held["first_anomaly"] == flight["first_anomaly"]
    assert held["first_anomaly"] is not None
    a, b = RunRecord(flight["run_dir"]), RunRecord(held["run_dir"])
    assert b.status == "done" and [s.index for s in b.steps()] == list(range(6))
    rows = lambda r: [(x.phase, x.step, x.module, x.fingerprint) for x in r.stats()]  # noqa: E731
    assert rows(a) == rows(b)
    assert [f["name"] for f in a.files()] == [f["name"] for f in b.files()]


@pytest.mark.parametrize("flight", [True, False])
def test_a_write_that_fails_fails_the_run_and_closes_the_record(demo_loaded, runs_dir: Path, flight: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """As the run goes or, held (a sweep's run), only when it ends: the record must not then say 'done'."""
    original = RunWriter.add_step

    def add_step(self, info, tensors=None, images=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
        if info.index == 2:
            raise OSError(28, "No space left on device")
        return original(self, info, tensors, images, **kwargs)

    monkeypatch.setattr(RunWriter, "add_step", add_step)
    with pytest.raises(DiskFull, match="disk is full"):  # the environment, not the pipeline: no RunFailed
        execute_run(demo_loaded, RunSpec(prompt="a red circle on a blue background", steps=6), runs_dir,
                    flight=flight)
    (folder,) = list(runs_dir.iterdir())
    record = RunRecord(folder)
    assert record.status == "failed" and [s.index for s in record.steps()] == [0, 1]


def test_traced_modules_are_cached_and_follow_a_swapped_module(demo_loaded) -> None:
    pipe = demo_loaded.pipe
    assert traced_modules(pipe) == list(iter_modules(pipe))
    resnet = pipe.unet.mid_block.resnets[0]
    original = resnet.conv1
    try:
        resnet.conv1 = torch.nn.Conv2d(original.in_channels, original.out_channels, 3, padding=1)
        leaves = traced_modules(pipe, "leaf")
        assert leaves == list(iter_modules(pipe, "leaf"))
        assert resnet.conv1 in [m for _, m in leaves] and original not in [m for _, m in leaves]
    finally:
        resnet.conv1 = original
    assert original in [m for _, m in traced_modules(pipe, "leaf")]


@pytest.mark.parametrize(("lasting", "status"), [(False, "failed"), (True, "interrupted")])
def test_no_step_event_when_its_batch_could_not_be_committed(demo_loaded, runs_dir: Path, lasting: bool, status: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The writes of a batch went in but its commit failed (a full disk): their steps are not announced, the run
    fails with the error, and the record is closed — 'interrupted' when not even its status could be written."""
    monkeypatch.setattr(record_buffer, "FLUSH_EVERY_S", 0.0)
    original, commits = RunWriter.commit, iter(range(10**6))

    def commit(self) -> None:  # noqa: ANN001
        call = next(commits)  # the initial batch, steps 0 and 1 go in; step 2's commit fails
        if call == 3:
            raise sqlite3.OperationalError("database or disk is full")
        original(self)

    monkeypatch.setattr(RunWriter, "commit", commit)
    if lasting:  # the final status cannot be written either
        set_meta = RunWriter._set_meta

        def no_status(self, **values) -> None:  # noqa: ANN001, ANN003
            if "status" in values:
                raise sqlite3.OperationalError("database or disk is full")
            set_meta(self, **values)

        monkeypatch.setattr(RunWriter, "_set_meta", no_status)
    events: list[tuple[str, int | None]] = []
    with pytest.raises(DiskFull, match="disk is full"):
        execute_run(demo_loaded, RunSpec(prompt="a red circle on a blue background", steps=6), runs_dir,
                    on_progress=lambda e: events.append((e["event"], e.get("step"))))
    (folder,) = list(runs_dir.iterdir())
    record = RunRecord(folder)
    assert [s for e, s in events if e == "step"] == [0, 1] and events[-1][0] == "failed"
    assert record.status == status and {0, 1} <= {s.index for s in record.steps()}


def test_a_due_batch_is_written_in_the_middle_of_a_slow_step_and_before_the_decode(
        demo_loaded, runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps that ended long before a crash are on disk though no step has ended since (a hang, an OOM kill)."""
    monkeypatch.setattr(record_buffer, "FLUSH_EVERY_S", 0.5)
    unet_calls, seen, slowed = iter(range(10**6)), {}, []

    def slow_fifth_step(*_args) -> None:  # noqa: ANN002
        if next(unet_calls) == 4:
            slowed.append(True)
            time.sleep(0.6)

    def peek(name: str):  # noqa: ANN202
        def hook(*_args) -> None:  # noqa: ANN002
            if slowed and name not in seen:
                seen[name] = [s.index for s in RunRecord(next(runs_dir.iterdir())).steps()]
        return hook

    unet, vae = demo_loaded.pipe.unet, demo_loaded.pipe.vae
    handles = [unet.register_forward_pre_hook(slow_fifth_step),
               unet.up_blocks[0].register_forward_hook(peek("mid step 4")),
               vae.post_quant_conv.register_forward_pre_hook(peek("decode"))]
    try:
        execute_run(demo_loaded, RunSpec(prompt="a red circle on a blue background", steps=6), runs_dir)
    finally:
        for handle in handles:
            handle.remove()
    assert seen["mid step 4"][:4] == [0, 1, 2, 3]  # written at a traced output of step 4, once due
    assert seen["decode"] == list(range(6))  # the last step is always written before the decode

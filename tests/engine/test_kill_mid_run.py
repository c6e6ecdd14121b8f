"""The flight recorder survives SIGKILL: a real `ghostviewer run` killed mid-way keeps every committed step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ghostviewer.record import RecordError, RunRecord


def _committed_steps(runs_dir: Path) -> int:
    for folder in runs_dir.iterdir():
        try:
            return len(RunRecord(folder).steps())
        except RecordError:
            return 0
    return 0


def test_sigkill_mid_run_keeps_committed_steps(runs_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ghostviewer", "run", "--prompt", "a white cross on a green background",
         "--steps", "400", "--runs-dir", str(runs_dir), "--json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        deadline = time.monotonic() + 120
        while _committed_steps(runs_dir) < 5:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "run ended early"
            assert time.monotonic() < deadline, "the run never committed 5 steps"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    record = RunRecord(next(runs_dir.iterdir()))
    assert record.status == "interrupted" and not record.complete
    steps = [s.index for s in record.steps()]
    assert len(steps) >= 5 and steps == list(range(len(steps))) and len(steps) < 400
    for index in steps:
        assert record.stats(phase="denoise", step=index), f"step {index} lost its stats"
        assert np.isfinite(record.step_tensors(index)["latents"]).all()
    assert record.stats(phase="encode")
    assert record.image_path("final") is None  # never reached

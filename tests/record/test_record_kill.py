"""Flight recorder: a writer killed with SIGKILL mid-run leaves every committed step readable."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.record import RunRecord

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys, time
import numpy as np
from ghostviewer.record import RunWriter, StatRow, StepInfo

writer = RunWriter.create(sys.argv[1], {"prompt": "kill me", "steps": 1000}, {}, run_id="victim")
seq = 0
for step in range(1000):
    rows = []
    for m in range(3):
        rows.append(StatRow("denoise", step, f"unet.block.{m}", 0, seq, (2, 2), "float32",
                            -1.0, 1.0, 0.0, 1.0, float(step), 0, 0))
        seq += 1
    writer.add_stats(rows)
    writer.event("step", f"step {step} done")
    writer.add_step(StepInfo(step, 1000.0 - step, None, 0.05, None, None, None, "rss"),
                    tensors={"latents": np.full((2, 2), step, np.float32)})
    print(step, flush=True)
    time.sleep(0.05)
"""


def sigkill_after(script: str, folder: Path, what: str = "writer") -> tuple[int, int | None]:
    """Run `python -c script folder`, which prints a counter a line as it commits; SIGKILL it once it printed 5.
    Returns (the last number it printed, its return code). Shared with the study record's kill test."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    last = -1
    deadline = time.monotonic() + 120
    try:
        assert proc.stdout is not None
        while last < 5:
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"{what} exited early: {proc.stderr.read() if proc.stderr else ''}")
            last = int(line)
            assert time.monotonic() < deadline, f"{what} too slow"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    return last, proc.returncode


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_leaves_committed_steps(tmp_path: Path) -> None:
    last, returncode = sigkill_after(SCRIPT, tmp_path)
    assert returncode == -signal.SIGKILL

    record = RunRecord(tmp_path / "victim")
    assert record.status == "interrupted" and record.complete is False
    assert record.error is None and record.elapsed_s is None
    indices = [s.index for s in record.steps()]
    assert indices[: last + 1] == list(range(last + 1))  # every printed step (maybe one more) is there
    assert indices == list(range(len(indices)))
    for step in indices:
        rows = record.stats(step=step)
        assert [r.module for r in rows] == ["unet.block.0", "unet.block.1", "unet.block.2"]
        assert rows[0].absmax == float(step)
        assert np.all(record.step_tensors(step)["latents"] == step)
    assert len(record.events(kind="step")) >= last + 1
    assert record.summary()["prompt"] == "kill me"

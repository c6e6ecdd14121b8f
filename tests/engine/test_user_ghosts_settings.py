"""No silent setting: a pipeline object the user hands over runs as it is, and a dtype or device it is not in is
refused in one line — never recorded as if it had run."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer import api
from ghostviewer.engine.errors import GhostError


def test_a_dtype_the_object_is_not_in_is_refused_not_recorded(demo_loaded, runs_dir: Path) -> None:
    with pytest.raises(GhostError) as caught:
        api.run(demo_loaded.pipe, "a red circle", steps=2, dtype="float16", runs_dir=runs_dir)
    message = str(caught.value)
    assert "\n" not in message and "float16" in message and "unet is float32" in message
    assert not any(runs_dir.iterdir())  # nothing recorded


def test_a_device_the_object_is_not_on_is_refused(demo_loaded, runs_dir: Path) -> None:
    with pytest.raises(GhostError, match="device 'cuda' cannot be applied"):
        api.run(demo_loaded.pipe, "a red circle", steps=2, device="cuda", runs_dir=runs_dir)


def test_the_dtype_the_object_is_in_runs_and_a_scheduler_is_applied(demo_loaded, runs_dir: Path) -> None:
    result = api.run(demo_loaded.pipe, "a red circle", steps=2, dtype="float32", scheduler="euler",
                     runs_dir=runs_dir)
    from ghostviewer.record import RunRecord

    record = RunRecord(result["run_dir"])
    assert record.settings["dtype"] == "float32" and record.settings["scheduler"] == "euler"
    assert type(demo_loaded.pipe.scheduler).__name__ == "DDIMScheduler"  # the run's scheduler did not leak

"""The window, a real engine process and a disk that fills mid-run: the user reads one clear line (no traceback),
and the run's record, failed with the reason, is in the history. Needs a small tmpfs (root with CAP_SYS_ADMIN);
tests/failures/test_full_disk.py checks the same event text without a mount."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ghostviewer.record import RunRecord
from tests.gui.handover import hand_over
from tests.gui.live_window import RUN_TIMEOUT_MS, needs_demo, run_job

pytestmark = needs_demo
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@pytest.fixture
def full_disk_window(live_window, qtbot, tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001
    """The live folder's window and engine (conftest.py), its runs folder on the full disk for this test."""
    disk = tmp_path_factory.mktemp("disk")
    if os.geteuid() != 0 or _LIBC.mount(b"tmpfs", str(disk).encode(), b"tmpfs", 0, b"size=3m") != 0:
        pytest.skip("cannot mount a small tmpfs here (not root, or no CAP_SYS_ADMIN)")
    try:
        info = os.statvfs(disk)
        (disk / "filler").write_bytes(bytes(info.f_bavail * info.f_frsize - 300 * 1024))
        live_window.state.history.set_runs_dir(disk / "runs")
        yield live_window
    finally:
        hand_over(live_window, qtbot, tmp_path_factory.mktemp("after-full-disk") / "runs")  # off the full disk
        _LIBC.umount2(str(disk).encode(), 2)  # MNT_DETACH: the engine process may still hold a file there


def test_a_run_that_fills_the_disk_says_so_in_one_line(full_disk_window, qtbot) -> None:  # noqa: ANN001
    win = full_disk_window
    qtbot.waitUntil(lambda: win.state.pipeline.status == "loaded", timeout=RUN_TIMEOUT_MS)
    job = run_job(qtbot, win, prompt="a red circle on a blue background", seed=3, seed_locked=True, steps=4)
    assert job.status == "failed"
    message = win.state.reporter.last_message or ""
    assert message.startswith("The run failed: the disk is full (no space left in "), message
    assert "\n" not in message and "Traceback" not in message and "Error:" not in message
    record = RunRecord(Path(job.run_dir))
    assert record.status == "failed" and (record.error or "").startswith("the disk is full")
    qtbot.waitUntil(lambda: any(Path(e.path) == Path(job.run_dir) for e in win.state.history.entries), timeout=5000)

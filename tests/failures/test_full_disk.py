"""A disk that fills up while GhostViewer writes: one line, exit 2, a record that reads how it ended and why.

The disk is real where this process may mount one: a 3 MiB tmpfs (root with CAP_SYS_ADMIN), filled with a file
leaving the room each test wants. Elsewhere (CI in a container, a user account) those tests skip, and the last one
still runs: SQLite's own SQLITE_FULL, raised by its page limit (`PRAGMA max_page_count`) at the record's real writes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import io
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.cli import main as cli_main
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.record import RunRecord, RunWriter, StepInfo, StudyRecord, sqlite_store
from ghostviewer.record.disk import DiskFull
from ghostviewer.record.history import list_entries
from ghostviewer.spec import RunSpec

PROMPT = "a red circle on a blue background"
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
MNT_DETACH = 2


def _mount_tmpfs(folder: Path, size: str) -> bool:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    return _LIBC.mount(b"tmpfs", str(folder).encode(), b"tmpfs", 0, f"size={size}".encode()) == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """fill(free_bytes) -> an empty runs folder on a real file system with about that much room left."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if not _mount_tmpfs(folder, "3m"):
        pytest.skip("cannot mount a small tmpfs here (not root, or no CAP_SYS_ADMIN)")

    def fill(free: int) -> Path:
        info = os.statvfs(folder)
        with open(folder / "filler", "wb") as handle:
            handle.write(bytes(max(0, info.f_bavail * info.f_frsize - free)))
        return folder / "runs"

    try:
        yield fill
    finally:
        _LIBC.umount2(str(folder).encode(), MNT_DETACH)


def _cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, err.getvalue()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def _assert_clean(runs: Path) -> list[RunRecord]:
    """Every record there reads, says how it ended (and why when it failed), lists only whole files; no *.tmp."""
    assert not list(runs.rglob("*.tmp")), "a half-written file was left behind"
    records = []
    for entry in list_entries(runs):
        if isinstance(entry, StudyRecord):
            continue
        record = RunRecord(entry.path)
        assert record.status in ("done", "failed"), record.status
        if record.status == "failed":
            assert "the disk is full" in (record.error or "")
        for listed in record.files():
            if listed["kind"] == "tensors":
                record.tensors(listed["name"])  # whole: it loads
            elif listed["kind"] == "image":
                assert record.image_path(listed["name"]) is not None
        record.summary()
        records.append(record)
    return records


def test_a_run_that_fills_the_disk_exits_2_in_one_line_and_leaves_a_clean_failed_record(
        small_disk: Callable[[int], Path]) -> None:
    runs = small_disk(300 * 1024)  # room for the record's creation and a step or two of a 4-step demo run
    code, err = _cli("run", "--pipeline", "demo", "--prompt", PROMPT, "--steps", "4", "--runs-dir", str(runs))
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err
    assert err.startswith("ghostviewer: the disk is full (no space left in ") and "the partial run is in" in err
    (record,) = _assert_clean(runs)
    assert record.status == "failed" and len(record.steps()) < 4


def test_whatever_the_room_left_a_run_ends_done_or_says_the_disk_is_full(small_disk: Callable[[int], Path],
                                                                         demo_loaded) -> None:
    """The disk filling at creation, mid-run, at the image, at the verdict or at the final status."""
    runs = small_disk(0)
    filler = runs.parent / "filler"
    outcomes = set()
    for free in (0, 150, 250, 350, 450, 520, 700):
        filler.unlink()
        info = os.statvfs(runs.parent)
        filler.write_bytes(bytes(max(0, info.f_bavail * info.f_frsize - free * 1024)))
        before = {p.name for p in runs.iterdir()} if runs.is_dir() else set()
        try:
            result = execute_run(demo_loaded, RunSpec(prompt=PROMPT, steps=4), runs)
            outcomes.add("done")
            assert RunRecord(result["run_dir"]).status == "done"
        except DiskFull as exc:
            assert "\n" not in str(exc) and str(exc).startswith("the disk is full")
            made = {p.name for p in runs.iterdir()} - before if runs.is_dir() else set()
            outcomes.add("failed" if made else "not created")
        _assert_clean(runs)
    assert {"done", "failed", "not created"} <= outcomes, outcomes


def test_a_record_that_cannot_be_created_says_so_and_leaves_nothing(small_disk: Callable[[int], Path]) -> None:
    runs = small_disk(0)
    runs.mkdir()
    fds = _open_fds()
    for free in (0, 40 * 1024, 120 * 1024):  # before the lock, at the database's image, at its first commit
        (runs.parent / "filler").unlink()
        small_disk(free)
        with pytest.raises(DiskFull, match=r"^the disk is full \(no space left in .*\): cannot create a run in it$"):
            RunWriter.create(runs, {"prompt": "p"}, {})
        assert list(runs.iterdir()) == []  # no half-made record for the history to trip on
    assert _open_fds() == fds  # its lock and database were let go
    code, err = _cli("run", "--pipeline", "demo", "--prompt", PROMPT, "--steps", "2", "--runs-dir", str(runs))
    assert code == 2 and err.count("\n") == 1 and "cannot create a run" in err


def test_an_image_or_tensors_file_that_does_not_fit_leaves_no_part_of_it(small_disk: Callable[[int], Path]) -> None:
    runs = small_disk(400 * 1024)
    with RunWriter.create(runs, {"prompt": "p"}, {}) as writer:
        writer.add_step(StepInfo(0, 900.0, None, 0.01, None, None, None, "rss"), {"latents": np.zeros(4, np.float32)})
        noise = np.random.default_rng(0).random((512, 512, 3), dtype=np.float32)
        with pytest.raises(DiskFull, match="the disk is full"):
            writer.save_image("big", noise)
        with pytest.raises(DiskFull, match="the disk is full"):
            writer.save_tensors("big", {"x": noise})
    record = RunRecord(writer.path)
    assert record.status == "done" and [s.index for s in record.steps()] == [0]
    assert {f["name"] for f in record.files()} == {"step_0000"}
    _assert_clean(runs)


def test_a_sweep_stops_at_a_full_disk_instead_of_counting_failed_runs(tmp_path: Path,
                                                                      small_disk: Callable[[int], Path]) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("a red circle\na blue square\n")
    runs = small_disk(1000 * 1024)  # three or four of the six runs
    code, err = _cli("sweep", str(listing), "--pipeline", "demo", "--seeds", "0-2", "--steps", "3",
                     "--runs-dir", str(runs))
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("ghostviewer: the disk is full"), err
    assert "FAIL" not in err  # no run was blamed on the pipeline
    (study,) = [e for e in list_entries(runs) if isinstance(e, StudyRecord)]
    assert study.status in ("failed", "interrupted")  # resumable either way
    _assert_clean(study.path / "runs")


def test_sqlite_full_at_the_real_writes_fails_the_run_with_its_reason(demo_loaded, runs_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no small disk can be mounted: SQLite's own SQLITE_FULL, from its page limit, mid-run."""
    connect = sqlite_store.connect

    def limited(db: Path, synchronous: str = "NORMAL") -> sqlite3.Connection:
        conn = connect(db, synchronous)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 12}")
        return conn

    monkeypatch.setattr(sqlite_store, "connect", limited)
    events: list[dict] = []
    with pytest.raises(DiskFull, match=r"^the disk is full .*; the partial run is in ") as info:
        execute_run(demo_loaded, RunSpec(prompt=PROMPT, steps=4), runs_dir, on_progress=events.append)
    (folder,) = list(runs_dir.iterdir())
    assert str(folder) in str(info.value)
    failed = [e for e in events if e["event"] == "failed"]
    assert failed and failed[-1]["error"].startswith("the disk is full")  # what the window shows, as is
    (record,) = _assert_clean(runs_dir)
    assert record.status == "failed"


DIES = """
import os, sys
from ghostviewer.record import RunWriter
RunWriter.create(sys.argv[1], {"prompt": "p"}, {}, run_id="dead")
os._exit(0)  # no finish, no finaliser: what a SIGKILL leaves
"""


def test_doctor_gives_back_a_dead_writers_space_reserve(runs_dir: Path) -> None:
    subprocess.run([sys.executable, "-c", DIES, str(runs_dir)], check=True, timeout=60)
    dead = runs_dir / "dead"
    assert (dead / sqlite_store.RESERVE_NAME).is_file() and RunRecord(dead).status == "interrupted"
    code, _ = _cli("doctor", str(runs_dir))
    assert code == 0 and not (dead / sqlite_store.RESERVE_NAME).exists()
    assert RunRecord(dead).status == "interrupted"

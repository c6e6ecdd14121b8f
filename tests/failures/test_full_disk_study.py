"""A full disk met by a sweep study's own index (study.sqlite), not by a run: the same one line as a run's own
DiskFull — the folder it could not write in and what is left on its disk — and, from the CLI, exit 2.

Where a small tmpfs can be mounted (tests/failures/test_full_disk.py's small_disk), the disk is really full;
everywhere, SQLite's own SQLITE_FULL from its page limit (`PRAGMA max_page_count`) at the index's real writes.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from ghostviewer.cli import main as cli_main
from ghostviewer.record import StudyWriter, sqlite_store
from ghostviewer.record.disk import DiskFull
from tests.failures.test_full_disk import small_disk  # noqa: F401 - the fixture

STUDY_FULL = (r"^the disk is full \(no space left in {folder}, [0-9.]+ (bytes|KiB|MiB|GiB) free\): cannot write "
              r"the index of study {study} \(study\.sqlite\); resume it once there is room$")


def _fill_index(study: StudyWriter) -> DiskFull:
    """Add runs (with long notes) until the index cannot take one more; the DiskFull it raised."""
    for index in range(100_000):
        try:
            study.add_run(study.runs_dir / f"run-{index}", {"prompt": "p", "seed": index}, note="n" * 3000)
        except DiskFull as exc:
            return exc
    raise AssertionError("the index never filled the disk")


def _limit_study_pages(monkeypatch: pytest.MonkeyPatch, spare: int) -> None:
    """study.sqlite may grow by `spare` pages past what it holds when opened; other databases are not limited."""
    connect = sqlite_store.connect

    def limited(db: Path, synchronous: str = "NORMAL") -> sqlite3.Connection:
        conn = connect(db, synchronous)
        if Path(db).name == "study.sqlite":
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {max(pages, 4) + spare}")
        return conn

    monkeypatch.setattr(sqlite_store, "connect", limited)


def test_a_study_index_on_a_full_disk_names_its_folder_and_the_room_left(
        small_disk: Callable[[int], Path]) -> None:  # noqa: F811 - the fixture imported above
    runs = small_disk(200 * 1024)
    study = StudyWriter.create(runs, "sweep", {"list": "l.txt"}, total=10)
    filler = runs.parent / "filler-2"
    info = os.statvfs(runs)
    filler.write_bytes(bytes(max(0, info.f_bavail * info.f_frsize - 8 * 1024)))  # 8 KiB left
    error = _fill_index(study)
    assert "\n" not in str(error)
    assert re.match(STUDY_FULL.format(folder=re.escape(str(study.path)), study=study.study_id), str(error)), error
    filler.unlink()
    study.add_run(study.runs_dir / "after", {"prompt": "p", "seed": -1})  # room again: the index takes more
    study.finish("done")


def test_sqlite_full_in_a_study_index_names_its_folder_and_the_room_left(
        runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _limit_study_pages(monkeypatch, spare=3)
    study = StudyWriter.create(runs_dir, "sweep", {"list": "l.txt"}, total=10)
    error = _fill_index(study)
    assert re.match(STUDY_FULL.format(folder=re.escape(str(study.path)), study=study.study_id), str(error)), error
    with pytest.raises(DiskFull, match="cannot write the index of study"):  # an event too
        study.event("note", "n" * 100_000)
    study.close()


def test_a_sweep_whose_index_fills_the_disk_exits_2_naming_the_study_folder(
        tmp_path: Path, runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listing = tmp_path / "list.txt"
    # a long prompt: each run's row in the index is ~2 KB, so the index fills after a few runs (~35 short ones)
    listing.write_text("a red circle on a blue background" + ", in a quiet room" * 100 + "\n")
    _limit_study_pages(monkeypatch, spare=1)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli_main(["sweep", str(listing), "--pipeline", "demo", "--seeds", "0-39", "--steps", "1",
                         "--runs-dir", str(runs_dir)])
    last = err.getvalue().strip().splitlines()[-1]
    (study,) = [p for p in runs_dir.iterdir() if p.name.startswith("sweep-")]
    assert code == 2, err.getvalue()
    assert re.match(STUDY_FULL.format(folder=re.escape(str(study)), study=study.name).replace("^", "^ghostviewer: "),
                    last), last

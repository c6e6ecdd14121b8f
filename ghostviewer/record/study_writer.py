"""StudyWriter: records a study (a group of runs made for one purpose) as it goes, resumable after a crash.

Every call commits at once: a study lasts minutes to hours, and a crash must lose at most the run being made.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

from . import schema
from . import study_schema as sschema
from .disk import DiskFull, disk_full, is_disk_full
from .errors import RecordError
from .lock import LOCK_NAME, WriterLock, refuse_links
from .sqlite_store import StoreWriter, connect
from .study_reader import SUMMARY_ROLE, StudyRecord

_F = TypeVar("_F", bound=Callable[..., Any])


def _space(method: _F) -> _F:
    """A write of the study's index that meets a full disk raises DiskFull: one line naming the study's folder
    and what is left on its disk, as a run's own writes do."""

    @functools.wraps(method)
    def checked(self: StudyWriter, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            if is_disk_full(exc):
                with contextlib.suppress(sqlite3.Error, RecordError):
                    self.conn.rollback()  # nothing half-written left in the transaction for the next write
                raise self._disk_full(exc) from exc
            raise

    return cast(_F, checked)


def _label(verdict: Any) -> str | None:
    """The verdict label of a CONTRACT run dict's `verdict` (a dict with 'label', or already a label)."""
    if isinstance(verdict, Mapping):
        label = verdict.get("label")
        return None if label is None else str(label)
    return None if verdict is None else str(verdict)


class StudyWriter(StoreWriter):
    """Writes `runs_dir/<study_id>/`: study.sqlite (WAL) and runs/, the folder for the study's own child runs."""

    FORMAT = sschema.STUDY_FORMAT

    def __init__(self, path: Path, conn: sqlite3.Connection, study_id: str, lock: WriterLock | None = None) -> None:
        super().__init__(path, conn, study_id, lock)
        self.study_id = study_id

    @property
    def runs_dir(self) -> Path:
        """The runs folder the engine writes this study's child runs into."""
        return self.path / sschema.RUNS_FOLDER

    # -- creation and resuming -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        runs_dir: Path,
        kind: str,
        params: dict[str, Any],
        total: int | None = None,
        study_id: str | None = None,
    ) -> StudyWriter:
        if kind not in sschema.KINDS:
            raise ValueError(f"study kind must be one of {sschema.KINDS}, not {kind!r}")
        meta = {
            "kind": kind,
            "params": params,
            "progress": {"done": 0, "total": None if total is None else int(total)},
            "result": None,
            "error": None,
        }
        path, conn, lock = cls._create_store(runs_dir, study_id, f"{kind}-", meta)
        (path / sschema.RUNS_FOLDER).mkdir(exist_ok=True)
        return cls(path, conn, path.name, lock)

    @classmethod
    def resume(cls, path: str | Path, force: bool = False) -> StudyWriter:
        """Reopen a study folder for more work (status back to 'running').

        A study that ended 'done' is refused unless force=True; a newer schema is always refused.
        """
        # Reading first validates the folder (schema, tables) without writing anything to a foreign file.
        db = sschema.STUDY_DB_NAME
        folder = Path(path).parent if Path(path).name == db else Path(path)  # before reading: a reader makes -shm
        refuse_links(folder, (db, f"{db}-wal", f"{db}-shm", LOCK_NAME, sschema.RUNS_FOLDER), "study")
        record = StudyRecord(path)
        previous = record.status  # read before the lock is ours: 'interrupted' when its writer died
        lock = WriterLock.acquire(record.path, "study")  # refused while another process writes it
        if previous == "done" and not force:
            lock.release()
            raise RecordError(f"study {record.study_id} is already done (resume with force to add to it)")
        try:
            conn = connect(record.path / sschema.STUDY_DB_NAME)
            sschema.STUDY_FORMAT.prepare(conn)
            conn.commit()
            writer = cls(record.path, conn, record.study_id, lock)
            writer._set_meta(status="running", error=None)
            writer.event("resumed", f"resumed with {len(writer.done_keys())} runs recorded", previous=previous)
        except sqlite3.Error as exc:
            raise RecordError(f"cannot reopen study database in {record.path}: {exc}") from exc
        writer.runs_dir.mkdir(exist_ok=True)
        return writer

    # -- writes (each committed at once) ------------------------------------------------------------------
    def _disk_full(self, exc: BaseException) -> DiskFull:
        return disk_full(self.path, f"cannot write the index of study {self.study_id} ({sschema.STUDY_DB_NAME}); "
                                    "resume it once there is room")

    @_space
    def _set_meta(self, **values: Any) -> None:
        super()._set_meta(**values)
        self.conn.commit()

    def _stored_dir(self, run_dir: str | Path) -> str:
        """Relative to the study folder when the run lies inside it (the study can move), else absolute."""
        target = Path(run_dir).resolve()
        home = self.path.resolve()
        return target.relative_to(home).as_posix() if target.is_relative_to(home) else str(target)

    @_space
    def add_run(
        self,
        run_dir: str | Path,
        key: Mapping[str, Any],
        role: str = "member",
        summary: Mapping[str, Any] | None = None,
        note: str = "",
    ) -> int:
        """Record one child run (summary: the CONTRACT run dict); returns its position. Keys are unique."""
        text = sschema.canonical_key(key)
        summary = summary or {}
        conn = self.conn
        (last,) = conn.execute("SELECT MAX(position) FROM runs").fetchone()
        position = 0 if last is None else int(last) + 1
        anomaly = summary.get("first_anomaly")
        try:
            conn.execute(
                "INSERT INTO runs (position, key, role, run_dir, status, verdict, first_anomaly, added_at, note)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    position,
                    text,
                    str(role),
                    self._stored_dir(run_dir),
                    None if summary.get("status") is None else str(summary["status"]),
                    _label(summary.get("verdict")),
                    None if anomaly is None else schema.dumps(anomaly),
                    time.time(),
                    str(note or ""),
                ),
            )
        except sqlite3.IntegrityError as exc:
            conn.rollback()
            raise RecordError(f"study {self.study_id} already has a run with key {text}") from exc
        conn.commit()
        return position

    @_space
    def demote(self, run_dir: str | Path, note: str) -> int:
        """A kept run whose record was deleted afterwards (a watch study's ring or max_bytes): its row becomes a
        summary row saying why. Returns how many rows changed (0: no such run)."""
        changed = self.conn.execute("UPDATE runs SET role = ?, note = ? WHERE run_dir = ? AND role != ?",
                                    (SUMMARY_ROLE, str(note), self._stored_dir(run_dir), SUMMARY_ROLE)).rowcount
        self.conn.commit()
        return int(changed)

    def done_keys(self) -> set[str]:
        """Canonical keys (study_schema.canonical_key) of the runs already recorded: what resume skips."""
        return {row[0] for row in self.conn.execute("SELECT key FROM runs")}

    def set_progress(self, done: int, total: int | None = None) -> None:
        """done runs out of total; total None keeps the total recorded so far."""
        if total is None:
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'progress'").fetchone()
            previous = schema.loads(row[0]) if row else None
            total = previous.get("total") if isinstance(previous, dict) else None
        self._set_meta(progress={"done": int(done), "total": None if total is None else int(total)})

    def set_result(self, result: dict[str, Any]) -> None:
        """The study's result so far (a 'summary' key, a few words, is what the history shows)."""
        self._set_meta(result=result)

    @_space
    def event(self, kind: str, message: str, level: str = "info", **data: Any) -> None:
        self.conn.execute(
            "INSERT INTO events (t, level, kind, message, data) VALUES (?, ?, ?, ?, ?)",
            (time.time(), level, kind, message, schema.dumps(data)),
        )
        self.conn.commit()

    def finish(self, status: str, result: dict[str, Any] | None = None, error: str | None = None) -> None:
        """Set the final status (and result), commit, and close; the database is left as one file if it can."""
        self._check_final(status)
        values: dict[str, Any] = {"status": status, "error": error}
        if result is not None:
            values["result"] = result
        self._set_meta(**values)
        self._close()  # folds the WAL back in, then lets the lock go

    def close(self) -> None:
        """Close without finishing (the study reads 'interrupted' and can be resumed)."""
        self._close(fold=False)

    def _finish_as(self, status: str, error: str | None) -> None:  # leaving a `with` block
        self.finish(status, error=error)

    def __repr__(self) -> str:
        return f"StudyWriter({str(self.path)!r})"


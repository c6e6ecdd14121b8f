"""StudyWriter: records a study (a group of runs made for one purpose) as it goes, resumable after a crash.

Every call commits at once: a study lasts minutes to hours, and a crash must lose at most the run being made.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from . import schema
from . import study_schema as sschema
from .errors import RecordError
from .lock import WriterLock
from .study_reader import StudyRecord
from .writer import _check_name

_FINISHED = ("done", "failed", "cancelled")


def _connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=5.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _label(verdict: Any) -> str | None:
    """The verdict label of a CONTRACT run dict's `verdict` (a dict with 'label', or already a label)."""
    if isinstance(verdict, Mapping):
        label = verdict.get("label")
        return None if label is None else str(label)
    return None if verdict is None else str(verdict)


class StudyWriter:
    """Writes `runs_dir/<study_id>/`: study.sqlite (WAL) and runs/, the folder for the study's own child runs."""

    def __init__(self, path: Path, conn: sqlite3.Connection, study_id: str, lock: WriterLock | None = None) -> None:
        self.path = path
        self.study_id = study_id
        self._conn: sqlite3.Connection | None = conn
        self._lock = lock  # held while this writer lives: readers tell 'running' from 'interrupted' by it

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
        runs_dir = Path(runs_dir)
        try:
            runs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RecordError(f"cannot create runs folder {runs_dir}: {exc.strerror or exc}") from exc
        path = cls._make_folder(runs_dir, kind, study_id)
        lock = WriterLock.acquire(path, "study")
        try:
            conn = _connect(path / sschema.STUDY_DB_NAME)
            sschema.create_tables(conn)
            sschema.migrate(conn)
            meta = {
                "study_id": path.name,
                "kind": kind,
                "created_at": datetime.now().astimezone().isoformat(timespec="milliseconds"),
                "status": "running",
                "params": params,
                "progress": {"done": 0, "total": None if total is None else int(total)},
                "result": None,
                "error": None,
            }
            conn.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [(k, schema.dumps(v)) for k, v in meta.items()],
            )
            conn.commit()
        except sqlite3.Error as exc:
            raise RecordError(f"cannot create study database in {path}: {exc}") from exc
        (path / sschema.RUNS_FOLDER).mkdir(exist_ok=True)
        return cls(path, conn, path.name, lock)

    @staticmethod
    def _make_folder(runs_dir: Path, kind: str, study_id: str | None) -> Path:
        if study_id is not None:
            _check_name(study_id)
            try:
                (runs_dir / study_id).mkdir()
            except FileExistsError as exc:
                raise RecordError(f"study folder already exists: {runs_dir / study_id}") from exc
            return runs_dir / study_id
        for _ in range(100):
            candidate = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
            try:
                (runs_dir / candidate).mkdir()
            except FileExistsError:
                continue
            return runs_dir / candidate
        raise RecordError(f"cannot find a free study id in {runs_dir}")

    @classmethod
    def resume(cls, path: str | Path, force: bool = False) -> StudyWriter:
        """Reopen a study folder for more work (status back to 'running').

        A study that ended 'done' is refused unless force=True; a newer schema is always refused.
        """
        # Reading first validates the folder (schema, tables) without writing anything to a foreign file.
        record = StudyRecord(path)
        previous = record.status  # read before the lock is ours: 'interrupted' when its writer died
        lock = WriterLock.acquire(record.path, "study")  # refused while another process writes it
        if previous == "done" and not force:
            lock.release()
            raise RecordError(f"study {record.study_id} is already done (resume with force to add to it)")
        try:
            conn = _connect(record.path / sschema.STUDY_DB_NAME)
            sschema.create_tables(conn)
            sschema.migrate(conn)
            conn.commit()
            writer = cls(record.path, conn, record.study_id, lock)
            writer._set_meta(status="running", error=None)
            writer.event("resumed", f"resumed with {len(writer.done_keys())} runs recorded", previous=previous)
        except sqlite3.Error as exc:
            raise RecordError(f"cannot reopen study database in {record.path}: {exc}") from exc
        writer.runs_dir.mkdir(exist_ok=True)
        return writer

    # -- writes (each committed at once) ------------------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RecordError(f"study {self.study_id} is finished; nothing more can be written")
        return self._conn

    @property
    def finished(self) -> bool:
        return self._conn is None

    def _set_meta(self, **values: Any) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [(k, schema.dumps(v)) for k, v in values.items()],
        )
        self.conn.commit()

    def _stored_dir(self, run_dir: str | Path) -> str:
        """Relative to the study folder when the run lies inside it (the study can move), else absolute."""
        target = Path(run_dir).resolve()
        home = self.path.resolve()
        return target.relative_to(home).as_posix() if target.is_relative_to(home) else str(target)

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

    def event(self, kind: str, message: str, level: str = "info", **data: Any) -> None:
        self.conn.execute(
            "INSERT INTO events (t, level, kind, message, data) VALUES (?, ?, ?, ?, ?)",
            (time.time(), level, kind, message, schema.dumps(data)),
        )
        self.conn.commit()

    def finish(self, status: str, result: dict[str, Any] | None = None, error: str | None = None) -> None:
        """Set the final status (and result), commit, and close; the database is left as one file if it can."""
        if status not in _FINISHED:
            raise ValueError(f"status must be one of {_FINISHED}, not {status!r}")
        values: dict[str, Any] = {"status": status, "error": error}
        if result is not None:
            values["result"] = result
        self._set_meta(**values)
        conn = self.conn
        try:
            conn.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.OperationalError:
            pass  # a reader holds the database; it stays in WAL mode, which readers handle too
        conn.close()
        self._conn = None
        if self._lock is not None:
            self._lock.release()

    def close(self) -> None:
        """Close without finishing (the study reads 'interrupted' and can be resumed)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock is not None:
            self._lock.release()

    # -- context manager ---------------------------------------------------------------------------------
    def __enter__(self) -> StudyWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.finished:
            return
        try:
            if exc is None:
                self.finish("done")
            elif isinstance(exc, KeyboardInterrupt):
                self.finish("cancelled", error="interrupted")
            else:
                self.finish("failed", error=f"{type(exc).__name__}: {exc}")
        except (sqlite3.Error, RecordError):
            if exc is None:
                raise
            # never mask the original exception; the study then reads as 'running'

    def __repr__(self) -> str:
        return f"StudyWriter({str(self.path)!r})"


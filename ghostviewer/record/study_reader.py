"""StudyRecord: read-only access to a study folder, finished, killed, or still being written."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import schema
from . import study_schema as sschema
from .errors import RecordError
from .lock import live_status
from .types import Event


@dataclass(frozen=True, slots=True)
class StudyRun:
    """One child run of a study, as the study's index recorded it (run_dir resolved against the study)."""

    position: int
    key: dict[str, Any]
    role: str
    run_dir: Path
    status: str | None
    verdict: str | None
    first_anomaly: dict[str, Any] | None
    note: str = field(default="")


def _loads(text: str | None) -> Any:
    try:
        return schema.loads(text)
    except ValueError:
        return text


class StudyRecord:
    """A study folder opened read-only. Each query sees the latest committed state of the study."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if path.name == sschema.STUDY_DB_NAME and path.is_file():
            path = path.parent
        if not path.is_dir():
            raise RecordError(f"not a folder: {path}")
        db = path / sschema.STUDY_DB_NAME
        if not db.is_file():
            raise RecordError(f"not a GhostViewer study (no {sschema.STUDY_DB_NAME}): {path}")
        self.path = path
        self._db = db.resolve()
        self._immutable = False
        try:
            tables = self._tables()
        except RecordError as exc:
            if not isinstance(exc.__cause__, sqlite3.OperationalError):
                raise
            self._immutable = True  # a WAL database on read-only media without its -shm file
            tables = self._tables()
        if "meta" not in tables:
            raise RecordError(f"not a GhostViewer study (no meta table in {sschema.STUDY_DB_NAME}): {path}")
        meta = self._meta()
        version = meta.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or "study_id" not in meta:
            raise RecordError(f"not a GhostViewer study (no schema version): {path}")
        sschema.check_version(version)  # before the table check: a newer schema may differ
        if not sschema.REQUIRED_TABLES <= tables:
            raise RecordError(f"not a GhostViewer study (missing tables in {sschema.STUDY_DB_NAME}): {path}")
        self.schema_version: int = version
        self.study_id: str = str(meta["study_id"])
        self.kind: str = str(meta.get("kind") or "")
        self.created_at: str | None = meta.get("created_at")

    # -- low level -------------------------------------------------------------------------------------
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        uri = self._db.as_uri() + ("?immutable=1" if self._immutable else "?mode=ro")
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=5.0)
        except sqlite3.Error as exc:
            raise RecordError(f"cannot open study database {self._db}: {exc}") from exc
        try:
            conn.execute("PRAGMA query_only=ON")
            return conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise RecordError(f"cannot read study database {self._db}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise RecordError(f"corrupt study database {self._db}: {exc}") from exc
        finally:
            conn.close()

    def _tables(self) -> set[str]:
        return {r[0] for r in self._query("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _meta(self) -> dict[str, Any]:
        return {key: _loads(value) for key, value in self._query("SELECT key, value FROM meta")}

    def _meta_value(self, key: str) -> Any:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return _loads(rows[0][0]) if rows else None

    def _status(self, stored: Any) -> str:
        # The one place a study's status is decided: 'running' whose writer is gone reads 'interrupted'.
        return live_status(self.path, stored, lambda: self._meta_value("status"))

    def _run_dir(self, stored: str) -> Path:
        target = Path(stored)
        if target.is_absolute():
            return target  # a run referenced from elsewhere (e.g. the two runs of a comparison)
        if not (self.path / target).resolve().is_relative_to(self.path.resolve()):
            raise RecordError(f"study {self.study_id} lists a run outside its folder: {stored}")
        return self.path / target

    # -- meta ------------------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        """'running' (being written), 'done', 'failed', 'cancelled' or 'interrupted' (its writer died)."""
        return self._status(self._meta_value("status"))

    @property
    def complete(self) -> bool:
        """True when the writer finished the study (whatever its status)."""
        return self.status in ("done", "failed", "cancelled")

    @property
    def params(self) -> dict[str, Any]:
        return self._meta_value("params") or {}

    @property
    def progress(self) -> dict[str, Any]:
        """{'done': int, 'total': int | None}."""
        value = self._meta_value("progress")
        return value if isinstance(value, dict) else {"done": 0, "total": None}

    @property
    def result(self) -> dict[str, Any] | None:
        return self._meta_value("result")

    @property
    def error(self) -> str | None:
        return self._meta_value("error")

    @property
    def runs_dir(self) -> Path:
        """The folder that holds the study's own child runs."""
        return self.path / sschema.RUNS_FOLDER

    # -- child runs and events ---------------------------------------------------------------------------
    def runs(self) -> list[StudyRun]:
        """The child runs in the order they were added."""
        rows = self._query(
            "SELECT position, key, role, run_dir, status, verdict, first_anomaly, note FROM runs ORDER BY position"
        )
        return [
            StudyRun(position, _loads(key), role, self._run_dir(run_dir), status, verdict,
                     _loads(anomaly), note or "")
            for position, key, role, run_dir, status, verdict, anomaly, note in rows
        ]

    def events(self, kind: str | None = None) -> list[Event]:
        sql = "SELECT t, level, kind, message, data FROM events"
        params: tuple[Any, ...] = ()
        if kind is not None:
            sql, params = sql + " WHERE kind = ?", (kind,)
        rows = self._query(sql + " ORDER BY t, id", params)
        return [Event(t, lv, k, m, _loads(d) or {}) for t, lv, k, m, d in rows]

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description of the study and its child runs (for --json output and bundles)."""
        meta = self._meta()
        return {
            "study_dir": str(self.path),
            "study_id": self.study_id,
            "kind": self.kind,
            "status": self._status(meta.get("status")),
            "created_at": meta.get("created_at"),
            "params": meta.get("params") or {},
            "progress": meta.get("progress") or {"done": 0, "total": None},
            "result": meta.get("result"),
            "error": meta.get("error"),
            "runs": [
                {"position": r.position, "key": r.key, "role": r.role, "run_dir": str(r.run_dir),
                 "status": r.status, "verdict": r.verdict, "first_anomaly": r.first_anomaly, "note": r.note}
                for r in self.runs()
            ],
        }

    def __repr__(self) -> str:
        return f"StudyRecord({str(self.path)!r})"

"""StudyRecord: read-only access to a study folder, finished, killed, or still being written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import study_schema as sschema
from .errors import RecordError
from .sqlite_store import StoreRecord
from .sqlite_store import loads_or_text as _loads
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


class StudyRecord(StoreRecord):
    """A study folder opened read-only. Each query sees the latest committed state of the study."""

    FORMAT = sschema.STUDY_FORMAT

    def __init__(self, path: str | Path) -> None:
        _, meta = self._open(path)
        self.study_id: str = str(meta["study_id"])
        self.kind: str = str(meta.get("kind") or "")
        self.created_at: str | None = meta.get("created_at")

    # -- low level -------------------------------------------------------------------------------------
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

"""StudyRecord: read-only access to a study folder, finished, killed, or still being written."""

from __future__ import annotations

import os
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

    @property
    def kept(self) -> bool:
        """False for a summary row (a watched call whose full record was not kept): its run_dir does not exist."""
        return self.role != SUMMARY_ROLE and self.run_dir.is_dir()


SUMMARY_ROLE = "summary"  # a watch study's row of a call not kept (keep="anomalies", every Nth, ring, max_bytes)
NOT_KEPT = "summary only: not kept"
OWN_RUNS_ONLY = ("sweep", "baseline", "watch", "probe")  # studies whose every run lives in their own runs/ folder


class StudyRecord(StoreRecord):
    """A study folder opened read-only. Each query sees the latest committed state of the study."""

    FORMAT = sschema.STUDY_FORMAT

    def __init__(self, path: str | Path) -> None:
        _, meta = self._open(path)
        self.study_id: str = str(meta["study_id"])
        self.kind: str = str(meta.get("kind") or "")
        self.created_at: str | None = meta.get("created_at")

    # -- low level -------------------------------------------------------------------------------------
    def _run_dir(self, stored: str, seen: dict[str, Any] | None = None) -> Path:
        """The run folder a row names, refused when it lies outside the study where it must not. `seen`: what
        this listing already knows (the study's resolved folder, which of its subfolders are links), so that a
        study of 10,000 runs is listed with one lstat a run instead of two whole path resolutions."""
        if not isinstance(stored, str) or "\x00" in stored:  # no path at all (a number, a NUL byte)
            raise RecordError(f"study {self.study_id} lists a run outside its folder (not a path): {ascii(stored)}")
        seen = {} if seen is None else seen
        if stored and not stored.startswith("/") and "\\" not in stored and ":" not in stored \
                and self._plainly_inside(stored.split("/"), seen):
            return self.path / stored  # the common case, a run in the study's own runs/: no Path parsed twice
        target = Path(stored)
        if target.is_absolute():
            if self.kind in OWN_RUNS_ONLY and not target.resolve().is_relative_to(self._home(seen)):
                # a sweep's (a baseline's, a watch's, a probe's) runs are all its own: one listed elsewhere is a
                # tampered index, and resuming must not read, count or skip by a run somewhere else
                raise RecordError(f"study {self.study_id} lists a run outside its folder: {ascii(stored)}")
            return target  # a run referenced from elsewhere (the original of a replay, the bad run of a bisection)
        if not self._plainly_inside(list(target.parts), seen) and \
                not (self.path / target).resolve().is_relative_to(self._home(seen)):
            raise RecordError(f"study {self.study_id} lists a run outside its folder: {ascii(stored)}")
        return self.path / target

    def _home(self, seen: dict[str, Any]) -> Path:
        home = seen.get("\x00home")
        if home is None:
            home = seen["\x00home"] = self.path.resolve()
        return home

    def _plainly_inside(self, parts: list[str], seen: dict[str, Any]) -> bool:
        """A relative path (its parts) with no '..' whose every folder under the study is not a link lies inside
        it (what resolving it would say, without resolving it); False: resolve it to know."""
        if ".." in parts:
            return False
        here = seen.get("\x00path")
        if here is None:
            here = seen["\x00path"] = str(self.path)
        for part in parts:
            if part in ("", "."):
                continue
            here = here + os.sep + part  # not os.path.join: 10,000 runs
            link = seen.get(here)
            if link is None:
                link = seen[here] = os.path.islink(here)
            if link:
                return False
        return True

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
    def runs(self, after: int | None = None) -> list[StudyRun]:
        """The child runs in the order they were added; `after`: only those added after that position (a live
        study's new rows: positions only grow)."""
        sql = "SELECT position, key, role, run_dir, status, verdict, first_anomaly, note FROM runs"
        params: tuple[int, ...] = ()
        if after is not None:
            sql, params = sql + " WHERE position > ?", (int(after),)
        rows = self._query(sql + " ORDER BY position", params)
        seen: dict[str, Any] = {}
        return [
            StudyRun(position, _loads(key), role, self._run_dir(run_dir, seen), status, verdict,
                     _loads(anomaly), note or "")
            for position, key, role, run_dir, status, verdict, anomaly, note in rows
        ]

    def last_position(self) -> int:
        """The position of the newest child run (-1: none yet); one lookup of the index's key."""
        (last,) = self._query("SELECT MAX(position) FROM runs")[0]
        return -1 if last is None else int(last)

    def kept_runs(self) -> list[StudyRun]:
        """The child runs whose records exist (a watch study's summary rows left out)."""
        return [run for run in self.runs() if run.kept]

    def events(self, kind: str | None = None) -> list[Event]:
        sql = "SELECT t, level, kind, message, data FROM events"
        params: tuple[Any, ...] = ()
        if kind is not None:
            sql, params = sql + " WHERE kind = ?", (kind,)
        rows = self._query(sql + " ORDER BY t, id", params)
        return [Event(t, lv, k, m, _loads(d) or {}) for t, lv, k, m, d in rows]

    def overview(self) -> dict[str, Any]:
        """The study without its runs (status, params, progress, result, error...), from one query: what a listing
        shows beside runs()."""
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
        }

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description of the study and its child runs (for --json output and bundles)."""
        return {
            **self.overview(),
            "runs": [
                {"position": r.position, "key": r.key, "role": r.role, "run_dir": str(r.run_dir),
                 "status": r.status, "verdict": r.verdict, "first_anomaly": r.first_anomaly, "note": r.note,
                 "kept": r.kept}
                for r in self.runs()
            ],
        }

    def __repr__(self) -> str:
        return f"StudyRecord({str(self.path)!r})"


def not_kept_reason(path: str | Path) -> str | None:
    """One line when `path` is the run folder of a watch study's summary row (a call recorded as a row only, its
    full record not kept); None otherwise. Readers say this instead of "not a folder"."""
    path = Path(path)
    parent = path.parent
    if path.exists() or parent.name != sschema.RUNS_FOLDER:
        return None
    try:
        study = StudyRecord(parent.parent)
        row = next((r for r in study.runs() if r.run_dir == path), None)
    except (RecordError, OSError):
        return None
    if row is None or row.role != SUMMARY_ROLE:
        return None
    what = ", ".join(f"{k} {v}" for k, v in row.key.items()) or path.name
    detail = ", ".join(x for x in (row.note.removeprefix("not kept").strip(" ()"), f"verdict {row.verdict}") if x)
    return f"{what} of {study.kind} study {study.study_id}: {NOT_KEPT} ({detail}); keep='all' keeps every full record"


def study_member_dirs(path: str | Path) -> list[Path] | None:
    """The run folders a study holds whole, in order (summary rows skipped); None when `path` is not a study.
    RecordError when it holds none (every row summary only)."""
    path = Path(path)
    if not (path / sschema.STUDY_FORMAT.db_name).is_file():
        return None
    study = StudyRecord(path)
    runs = study.runs()
    kept = [r.run_dir for r in runs if r.kept]
    if not kept:
        rows = sum(1 for r in runs if r.role == SUMMARY_ROLE)
        raise RecordError(f"{study.kind} study {study.study_id} holds no full record: "
                          f"{rows} row(s), {NOT_KEPT}")
    return kept

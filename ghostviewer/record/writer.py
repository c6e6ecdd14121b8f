"""RunWriter: writes one run folder as the run goes (a flight recorder, one transaction per step)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
from PIL import Image
from safetensors.numpy import save

from . import schema
from .disk import disk_full, is_disk_full
from .errors import RecordError
from .lock import WriterLock, refuse_links
from .runs_index import INDEX_NAME, note_finished
from .sqlite_store import StoreWriter
from .sqlite_store import check_name as _check_name
from .types import StatColumns, StatRow, StepInfo

_F = TypeVar("_F", bound=Callable[..., Any])


def _step_name(index: int) -> str:
    return f"step_{index:04d}"


def _space(method: _F) -> _F:
    """A write that meets a full disk raises DiskFull (one line: the folder, what is left) from the raw error."""

    @functools.wraps(method)
    def checked(self: RunWriter, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            if is_disk_full(exc):
                raise self._disk_full(exc) from exc
            raise

    return cast(_F, checked)


def _write_file(target: Path, write: Callable[[Path], object]) -> None:
    """write(tmp) then rename over target: a reader sees the whole file or none; a failed write (a full disk)
    leaves no part of it behind."""
    tmp = target.with_name(target.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def to_uint8_image(image: np.ndarray) -> np.ndarray:
    """HxW, HxWx1, HxWx3 or HxWx4 -> uint8. Floats are read as [0, 1]; NaN and -Inf -> 0, +Inf -> 255."""
    arr = np.asarray(image)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if not (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] in (3, 4))):
        raise ValueError(f"image must be HxW, HxWx3 or HxWx4, got shape {arr.shape}")
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8) * 255
    if np.issubdtype(arr.dtype, np.floating):
        values = np.nan_to_num(arr.astype(np.float32), nan=0.0, posinf=1.0, neginf=0.0)
        return np.round(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8)
    if np.issubdtype(arr.dtype, np.integer):
        return np.clip(arr, 0, 255).astype(np.uint8)
    raise ValueError(f"unsupported image dtype {arr.dtype}")


class RunWriter(StoreWriter):
    """Writes `runs_dir/<run_id>/`: run.sqlite (WAL; step tensors inline), tensors/*.safetensors, images/*.png."""

    FORMAT = schema.RUN_FORMAT
    SUBFOLDERS = ("tensors", "images")
    RESERVE_BYTES = 64 * 1024  # the final status, elapsed time and error: a few pages of the WAL
    # Commits do not wait for the disk: every committed step survives the process dying (a segfault, an OOM kill,
    # what a flight recorder is for); an OS crash or power cut can lose the last ones or damage the file (the
    # reader then says so). Waiting for the disk cost ~2 ms a run, ~1 % of a demo run.
    SYNCHRONOUS = "OFF"

    def __init__(self, path: Path, conn: sqlite3.Connection, run_id: str, lock: WriterLock | None = None) -> None:
        super().__init__(path, conn, run_id, lock)
        self.run_id = run_id
        self._t0 = time.monotonic()
        self._shapes: dict[Any, str] = {}
        self._steps: set[int] = {int(i) for (i,) in conn.execute('SELECT "index" FROM steps')}
        self._fts = (
            conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (schema.FTS_TABLE,)).fetchone()
            is not None
        )

    # -- creation ---------------------------------------------------------------------------------
    @classmethod
    def create(
        cls, runs_dir: Path, settings: dict[str, Any], environment: dict[str, Any], run_id: str | None = None,
        call: dict[str, Any] | None = None,
    ) -> RunWriter:
        """`call`: a watched call as it was made (engine/watch/call_record.py), kept beside the settings; runs that
        GhostViewer made itself have none, and read as they always have."""
        meta = {
            "settings": settings,
            "environment": environment,
            "verdict": None,
            "first_anomaly": None,
            "elapsed_s": None,
            "error": None,
        }
        if call is not None:
            meta["call"] = call
        path, conn, lock = cls._create_store(runs_dir, run_id, "", meta)
        return cls(path, conn, path.name, lock)

    # -- buffered writes ----------------------------------------------------------------------------
    @_space
    def event(self, kind: str, message: str, level: str = "info", **data: Any) -> None:
        """Log an event (buffered until the next step/commit)."""
        cur = self.conn.execute(
            "INSERT INTO events (t, level, kind, message, data) VALUES (?, ?, ?, ?, ?)",
            (time.time(), level, kind, message, schema.dumps(data)),
        )
        if self._fts:
            self.conn.execute(
                f"INSERT INTO {schema.FTS_TABLE} (rowid, message) VALUES (?, ?)", (cur.lastrowid, message)
            )

    @_space
    def add_stats(self, rows: Iterable[StatRow] | StatColumns) -> None:
        """Add module statistics (buffered until the next step/commit). NaN stats are stored as NULL."""
        c = rows if isinstance(rows, StatColumns) else _columns(rows)
        shapes = self._shapes  # a run has few distinct shapes: each one's JSON is made once
        for key in set(c.shape) - shapes.keys():
            shapes[key] = json.dumps([int(d) for d in key])
        self.conn.executemany(
            "INSERT INTO stats (phase, step, module, call, seq, shape, dtype, min, max, mean, std, absmax,"
            " nan_count, inf_count, fp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            zip(c.phase, c.step, c.module, c.call, c.seq, [shapes[k] for k in c.shape], c.dtype, c.min, c.max,
                c.mean, c.std, c.absmax, c.nan_count, c.inf_count, c.fingerprint, strict=True),
        )

    def _add_file(self, name: str, kind: str, relpath: str, step: int | None) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO files (name, kind, relpath, step) VALUES (?, ?, ?, ?)",
            (name, kind, relpath, step),
        )

    @_space
    def save_tensors(self, name: str, tensors: dict[str, np.ndarray], step: int | None = None,
                     inline: bool = False) -> Path:
        """Write tensors/<name>.safetensors atomically and list it (row buffered until the next commit).
        inline: into the database's `blobs` table instead (committed with the rest; returns the database's path)."""
        _check_name(name)
        self.conn  # noqa: B018 - refuse writes after finish
        if inline:
            arrays = {str(k): np.ascontiguousarray(np.asarray(v)) for k, v in tensors.items()}
            self.conn.execute("INSERT OR REPLACE INTO blobs (name, data) VALUES (?, ?)", (name, save(arrays)))
            self._add_file(name, "tensors", schema.INLINE_PREFIX + name, step)
            return self.path / schema.DB_NAME
        relpath = f"tensors/{name}.safetensors"
        target = self.path / relpath
        arrays = {str(k): np.ascontiguousarray(np.asarray(v)) for k, v in tensors.items()}
        data = save(arrays)  # the bytes, written by Python: a full disk is then an OSError with its errno
        _write_file(target, lambda tmp: tmp.write_bytes(data))
        self._add_file(name, "tensors", relpath, step)
        return target

    @_space
    def save_image(self, name: str, image: np.ndarray, step: int | None = None) -> Path:
        """Write images/<name>.png atomically. Float images are [0, 1]; NaN becomes black. Always written."""
        _check_name(name)
        self.conn  # noqa: B018 - refuse writes after finish
        relpath = f"images/{name}.png"
        target = self.path / relpath
        # compress_level 1: previews are written every step and are tiny; fast beats small here.
        picture = Image.fromarray(to_uint8_image(image))
        _write_file(target, lambda tmp: picture.save(tmp, format="PNG", compress_level=1))
        self._add_file(name, "image", relpath, step)
        return target

    # -- commits ------------------------------------------------------------------------------------
    @_space
    def add_step(
        self,
        info: StepInfo,
        tensors: dict[str, np.ndarray] | None = None,
        images: dict[str, np.ndarray] | None = None,
        commit: bool = True,
    ) -> None:
        """Write the step's files, insert its row, and commit everything buffered since the last commit (unless
        `commit` is False: a run written at its end commits once)."""
        conn = self.conn
        index = int(info.index)
        if index in self._steps:  # this writer made the record: its steps are the ones it inserted
            raise RecordError(f"step {index} is already recorded in run {self.run_id}")
        if tensors:
            self.save_tensors(_step_name(index), tensors, step=index, inline=True)
        for image_name, image in (images or {}).items():
            self.save_image(f"{_step_name(index)}_{_check_name(image_name)}", image, step=index)
        conn.execute(
            'INSERT INTO steps ("index", timestep, sigma, wall_s, mem_before, mem_after, mem_peak, mem_kind,'
            " committed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                index,
                _opt_float(info.timestep),
                _opt_float(info.sigma),
                float(info.wall_s),
                _opt_int(info.mem_before),
                _opt_int(info.mem_after),
                _opt_int(info.mem_peak),
                info.mem_kind,
                time.time(),
            ),
        )
        self._steps.add(index)
        if commit:
            conn.commit()

    @_space
    def commit(self) -> None:
        """Commit what was buffered (stats/events of the encode and decode phases)."""
        self.conn.commit()

    @_space
    def set_verdict(self, verdict: dict[str, Any], first_anomaly: dict[str, Any] | None,
                    first_warning: dict[str, Any] | None = None) -> None:
        """Record the verdict, first anomaly and first (benign) warning (committed at once)."""
        self._set_meta(verdict=verdict, first_anomaly=first_anomaly, first_warning=first_warning)
        self.conn.commit()

    @_space
    def set_samples(self, verdicts: list[dict[str, Any]], anomalies: list[dict[str, Any] | None]) -> None:
        """A batch's verdict per image and where each image first showed NaN/Inf (None: never); committed at once.
        `verdict` stays the worst of them."""
        self._set_meta(verdicts=verdicts, sample_anomalies=anomalies)
        self.conn.commit()

    def finish(self, status: str, elapsed_s: float, error: str | None = None) -> None:
        """Set the final status, commit, and close. The database is left as a single file when possible."""
        self._check_final(status)
        try:
            self._commit_final({"status": status, "elapsed_s": float(elapsed_s), "error": error})
        except (sqlite3.Error, RecordError):
            # The status cannot be written, even with the reserve given back: the record is closed all the same,
            # and without its writer's lock it reads 'interrupted', which is what it is.
            with contextlib.suppress(sqlite3.Error):
                self.conn.rollback()
            self._close(fold=False)
            raise
        # what its runs folder's index lists (a folder without an index, a small one, has nothing to keep up to date)
        listed = self._listing() if os.path.lexists(self.path.parent / INDEX_NAME) else None
        self._close()  # folds the WAL back in, then lets the lock go
        if listed is not None:  # its runs folder's index (a cache: the history lists the run without it too)
            note_finished(self.path, *listed)

    def _listing(self) -> tuple[dict[str, str], str | None] | None:
        """The meta texts and final image the runs index lists the run by (record/runs_index.py)."""
        try:
            meta = dict(self.conn.execute("SELECT key, value FROM meta").fetchall())
            image = self.conn.execute("SELECT relpath FROM files WHERE name = 'final' AND kind = 'image'").fetchone()
        except sqlite3.Error:
            return None
        return meta, None if image is None else str(image[0])

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _finish_as(self, status: str, error: str | None) -> None:  # leaving a `with` block
        self.finish(status, self.elapsed(), error=error)


def annex_image(run_dir: str | Path, name: str, image: np.ndarray, step: int | None = None) -> Path:
    """Add an image to a finished run through its record (e.g. a full VAE decode of one step asked for later):
    written atomically under images/ and listed in the run's files table, so readers and bundles see it."""
    run_dir = Path(run_dir)
    _check_name(name)
    db = run_dir / schema.DB_NAME
    if not db.is_file():
        raise RecordError(f"not a GhostViewer run (no {schema.DB_NAME}): {run_dir}")
    refuse_links(run_dir, (schema.DB_NAME, f"{schema.DB_NAME}-wal", f"{schema.DB_NAME}-shm", "images"), "run")
    relpath = f"images/{name}.png"
    target = run_dir / relpath
    picture = Image.fromarray(to_uint8_image(image))
    try:
        target.parent.mkdir(exist_ok=True)
        _write_file(target, lambda tmp: picture.save(tmp, format="PNG"))
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full(run_dir, f"cannot add {relpath} to run {run_dir.name}") from exc
        raise
    try:
        conn = sqlite3.connect(db, timeout=5.0)
        try:
            conn.execute(
                "INSERT OR REPLACE INTO files (name, kind, relpath, step) VALUES (?, 'image', ?, ?)",
                (name, relpath, step),
            )
            conn.commit()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if is_disk_full(exc):
            raise disk_full(run_dir, f"cannot add {relpath} to run {run_dir.name}") from exc
        raise RecordError(f"cannot add {relpath} to run {run_dir.name}: {exc}") from exc
    return target


def _opt_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _opt_int(value: int | None) -> int | None:
    return None if value is None else int(value)


def _columns(rows: Iterable[StatRow]) -> StatColumns:
    """Rows as columns, each value in its stored type (rows may come from numpy: np.float32, np.int64...)."""
    c = StatColumns()
    for r in rows:
        c.phase.append(r.phase)
        c.step.append(r.step)
        c.module.append(r.module)
        c.call.append(int(r.call))
        c.seq.append(int(r.seq))
        c.shape.append(tuple(int(d) for d in r.shape))
        c.dtype.append(str(r.dtype))
        for name in ("min", "max", "mean", "std", "absmax"):
            getattr(c, name).append(float(getattr(r, name)))
        c.nan_count.append(int(r.nan_count))
        c.inf_count.append(int(r.inf_count))
        c.fingerprint.append(None if r.fingerprint is None else int(r.fingerprint))
    return c

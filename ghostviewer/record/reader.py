"""RunRecord: read-only access to a run folder, finished, killed, or still being written."""

from __future__ import annotations

import fnmatch
import io
import os
import sqlite3
import stat
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as load_bytes
from safetensors.numpy import load_file

from ghostviewer.safe_read import loads

from . import schema
from .errors import RecordError
from .sqlite_store import StoreRecord
from .types import Event, StatRow, StepInfo

SERIES_STATS = ("min", "max", "mean", "std", "absmax", "nan_count", "inf_count", "fp16_headroom")
_GLOB_CHARS = frozenset("*?[")
_STAT_COLUMNS = (
    "phase, step, module, call, seq, shape, dtype, min, max, mean, std, absmax, nan_count, inf_count"
)


def _real(value: float | None) -> float:
    return float("nan") if value is None else float(value)  # SQLite stores NaN as NULL


def _stat_row(row: Sequence[Any]) -> StatRow:
    """A stored statistics row; RecordError (one line, a usage error) for one damaged or edited by hand."""
    try:
        return _checked_stat_row(row)
    except (TypeError, ValueError) as exc:
        raise RecordError(f"the record's statistics are damaged ({' '.join(str(exc).split())})") from None


def _checked_stat_row(row: Sequence[Any]) -> StatRow:
    phase, step, module, call, seq, shape, dtype, mn, mx, mean, std, absmax, nans, infs, fp = row
    return StatRow(
        phase,
        step,
        module,
        call,
        seq,
        tuple(schema.loads(shape)),
        dtype,
        _real(mn),
        _real(mx),
        _real(mean),
        _real(std),
        _real(absmax),
        nans,
        infs,
        fp,
    )


class RunRecord(StoreRecord):
    """A run folder opened read-only. Each query sees the latest committed state of the run."""

    FORMAT = schema.RUN_FORMAT

    def __init__(self, path: str | Path) -> None:
        tables, meta = self._open(path)
        self._fts = schema.FTS_TABLE in tables
        # Runs of schema 1 have no fingerprint column: read it as NULL (they compare by stats alone).
        has_fp = "fp" in {r[1] for r in self._query("PRAGMA table_info(stats)")}
        self._stat_columns = _STAT_COLUMNS + (", fp" if has_fp else ", NULL AS fp")
        self.run_id: str = str(meta["run_id"])

    # -- low level ----------------------------------------------------------------------------------
    def _file(self, relpath: str) -> Path:
        target = (self.path / relpath).resolve()
        if not target.is_relative_to(self.path.resolve()):
            raise RecordError(f"run {self.run_id} lists a file outside its folder: {relpath}")
        return target

    # -- meta ---------------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        """'running' (being written), 'done', 'failed', 'cancelled' or 'interrupted' (its writer died)."""
        return self._status(self._meta_value("status"))

    @property
    def complete(self) -> bool:
        """True when the writer finished the run (whatever its status); False while running or if killed."""
        return self.status not in ("running", "interrupted")

    @property
    def created_at(self) -> str | None:
        return self._meta_value("created_at")

    @property
    def settings(self) -> dict[str, Any]:
        return self._meta_object("settings") or {}

    @property
    def environment(self) -> dict[str, Any]:
        return self._meta_object("environment") or {}

    @property
    def verdict(self) -> dict[str, Any] | None:
        value = self._meta_value("verdict")
        return {"label": value} if isinstance(value, str) else self._object_or_refuse("verdict", value)

    @property
    def first_anomaly(self) -> dict[str, Any] | None:
        return self._meta_object("first_anomaly")

    @property
    def first_warning(self) -> dict[str, Any] | None:
        """The run's first benign warning (float16 headroom on the latents); None in records from before it."""
        return self._meta_object("first_warning")

    @property
    def call(self) -> dict[str, Any] | None:
        """A watched call as it was made (pipeline class, kind, keywords, generators…); None for GhostViewer's own."""
        return self._meta_object("call")

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        """The verdict of each image: a batch's own list, else the one verdict (none before it is judged)."""
        value = self._meta_value("verdicts")
        if isinstance(value, list):
            return [v for v in value if isinstance(v, dict)]
        verdict = self.verdict
        return [] if verdict is None else [verdict]

    @property
    def sample_anomalies(self) -> list[dict[str, Any] | None]:
        """Where each image of a batch first showed NaN/Inf (None: never); [] for a run of one image."""
        value = self._meta_value("sample_anomalies")
        return [v if isinstance(v, dict) else None for v in value] if isinstance(value, list) else []

    @property
    def fingerprint_kind(self) -> str:
        """How this run's fingerprints were made (record.types.FINGERPRINT_KIND); "sum" for older runs."""
        return str(self.environment.get("fingerprint") or "sum")

    def _meta_object(self, key: str) -> dict[str, Any] | None:
        return self._object_or_refuse(key, self._meta_value(key))

    def _object_or_refuse(self, key: str, value: Any) -> dict[str, Any] | None:
        """A meta value that must be a JSON object (or absent): anything else is a damaged record, said so."""
        if value is None or isinstance(value, dict):
            return value
        raise RecordError(f"run {self.path.name} is damaged: its {key} is a {type(value).__name__}, not an object")

    @property
    def elapsed_s(self) -> float | None:
        return self._meta_value("elapsed_s")

    # -- steps and stats ----------------------------------------------------------------------------
    def steps(self) -> list[StepInfo]:
        rows = self._query(
            'SELECT "index", timestep, sigma, wall_s, mem_before, mem_after, mem_peak, mem_kind'
            ' FROM steps ORDER BY "index"'
        )
        return [StepInfo(*row) for row in rows]

    def modules(self) -> list[str]:
        """Module paths in first-execution order."""
        return [
            r[0] for r in self._query("SELECT module FROM stats GROUP BY module ORDER BY MIN(seq), module")
        ]

    def _resolve_modules(self, module: str | Sequence[str]) -> list[str]:
        patterns = [module] if isinstance(module, str) else list(module)
        if not any(_GLOB_CHARS & set(p) for p in patterns):
            return patterns
        names = self.modules()
        chosen: set[str] = set()
        for pattern in patterns:
            if _GLOB_CHARS & set(pattern):
                chosen.update(n for n in names if fnmatch.fnmatchcase(n, pattern))
            else:
                chosen.add(pattern)
        return sorted(chosen)

    def stats(
        self, module: str | Sequence[str] | None = None, phase: str | None = None, step: int | None = None
    ) -> list[StatRow]:
        """Stats ordered by seq. module: an exact path, a glob ('unet.*.resnets.*'), or a list of either."""
        where: list[str] = []
        params: list[Any] = []
        if module is not None:
            where.append("module IN (SELECT value FROM json_each(?))")
            params.append(schema.dumps(self._resolve_modules(module)))
        if phase is not None:
            where.append("phase = ?")
            params.append(phase)
        if step is not None:
            where.append("step = ?")
            params.append(int(step))
        sql = f"SELECT {self._stat_columns} FROM stats"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_stat_row(r) for r in self._query(sql + " ORDER BY seq, id", params)]

    def series(self, module: str, stat: str, phase: str = "denoise") -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one stat of one module's first call (call 0) across steps.

        Outside 'denoise' (no step), the x values are 0, 1, 2... in execution order.
        """
        if stat not in SERIES_STATS:
            raise ValueError(f"stat must be one of {SERIES_STATS}, not {stat!r}")
        column = "absmax" if stat == "fp16_headroom" else stat
        rows = self._query(
            f"SELECT step, {column} FROM stats WHERE module = ? AND phase = ? AND call = 0"
            " ORDER BY step, seq",
            (module, phase),
        )
        steps = np.array([i if r[0] is None else r[0] for i, r in enumerate(rows)], dtype=np.int64)
        values = np.array([_real(r[1]) for r in rows], dtype=np.float64)
        if stat == "fp16_headroom":
            values = values / 65504.0
        return steps, values

    # -- tensors and images -------------------------------------------------------------------------
    def _lookup(self, name: str, kind: str) -> str | None:
        rows = self._query("SELECT relpath FROM files WHERE name = ? AND kind = ?", (name, kind))
        return rows[0][0] if rows else None

    def _load(self, relpath: str) -> dict[str, np.ndarray]:
        if relpath.startswith(schema.INLINE_PREFIX):
            return self._load_inline(relpath)
        target = self._file(relpath)
        try:
            if not stat.S_ISREG(target.stat().st_mode):  # a FIFO or a device would block the reader: never opened
                raise RecordError(f"run {self.run_id} lists {relpath}, which is not a regular file")
            return load_file(str(target))
        except FileNotFoundError as exc:
            raise RecordError(f"run {self.run_id} is missing {relpath}") from exc
        except (SafetensorError, OSError, ValueError) as exc:
            raise RecordError(f"run {self.run_id} has an unreadable tensor file {relpath}: {exc}") from exc

    def _load_inline(self, relpath: str) -> dict[str, np.ndarray]:
        """Tensors kept in the database (schema.INLINE_PREFIX): read and checked like a file."""
        name = relpath.removeprefix(schema.INLINE_PREFIX)
        try:
            rows = self._query("SELECT data FROM blobs WHERE name = ?", (name,), raw_operational=True)
        except sqlite3.OperationalError as exc:  # no blobs table: a record that lists what it cannot hold
            raise RecordError(f"run {self.run_id} is missing {relpath}: {exc}") from exc
        if not rows or not isinstance(rows[0][0], bytes):
            raise RecordError(f"run {self.run_id} is missing {relpath}")
        try:
            return load_bytes(rows[0][0])
        except (SafetensorError, ValueError, TypeError) as exc:
            raise RecordError(f"run {self.run_id} has unreadable tensors {relpath}: {exc}") from exc

    def inline_tensor_headers(self) -> list[tuple[int | None, dict[str, Any] | None]]:
        """(step, safetensors header) of each tensors blob the run lists, read without its tensors (incremental
        blob I/O; whole blobs on Python 3.10): what a bundle's size estimate needs. None: an unreadable header."""
        try:
            with self._reading(raw_operational=True) as conn:
                rows = conn.execute(
                    "SELECT f.step, b.rowid FROM files f JOIN blobs b ON f.relpath = ? || b.name"
                    " WHERE f.kind = 'tensors'", (schema.INLINE_PREFIX,)).fetchall()
                return [(step, _blob_header(conn, rowid)) for step, rowid in rows]
        except sqlite3.OperationalError:  # a record from before tensors were kept inline
            return []

    def check_tensors(self) -> None:
        """Read every tensors entry the run lists and holds (a killed run lacks its last: not an error); RecordError
        for the first that does not read — a safetensors header that lies about its offsets, shapes or dtypes."""
        inline = {name for (name,) in self._query("SELECT name FROM blobs")} if "blobs" in self._tables() else set()
        for entry in self.files():
            relpath = str(entry["relpath"])
            if entry["kind"] != "tensors":
                continue
            if relpath.startswith(schema.INLINE_PREFIX):
                held = relpath.removeprefix(schema.INLINE_PREFIX) in inline
            else:
                held = os.path.lexists(self._file(relpath))
            if held:
                self._load(relpath)

    def files(self) -> list[dict[str, Any]]:
        rows = self._query("SELECT name, kind, relpath, step FROM files ORDER BY kind, name")
        return [{"name": n, "kind": k, "relpath": r, "step": s} for n, k, r, s in rows]

    def step_tensors(self, step: int) -> dict[str, np.ndarray]:
        """Tensors saved with step `step` ({} when that step saved none)."""
        relpath = self._lookup(f"step_{int(step):04d}", "tensors")
        return {} if relpath is None else self._load(relpath)

    def tensors(self, name: str) -> dict[str, np.ndarray]:
        """Tensors saved under `name` (e.g. 'initial_noise'); KeyError when the run has none."""
        relpath = self._lookup(name, "tensors")
        if relpath is None:
            relpath = f"tensors/{name}.safetensors"  # written but not yet committed (e.g. killed run)
            if "/" in name or not (self.path / relpath).is_file():
                raise KeyError(f"run {self.run_id} has no tensors named {name!r}")
        return self._load(relpath)

    def image_path(self, name: str = "final") -> Path | None:
        """The image's file; None when there is none, or when its header declares more pixels than any run makes
        (MAX_IMAGE_PIXELS: a decompression bomb, which every reader of the path would otherwise decode)."""
        relpath = self._lookup(name, "image") or f"images/{name}.png"
        if "/" in name:
            return None
        target = self._file(relpath)
        return target if target.is_file() and declared_pixels(target) <= MAX_IMAGE_PIXELS else None

    def step_image_path(self, step: int, name: str) -> Path | None:
        return self.image_path(f"step_{int(step):04d}_{name}")

    # -- events -------------------------------------------------------------------------------------
    def events(
        self, search: str | None = None, level: str | None = None, kind: str | None = None
    ) -> list[Event]:
        """Events in time order. search: FTS5 query when available (else, or if malformed, a substring)."""
        where: list[str] = []
        params: list[Any] = []
        if level is not None:
            where.append("level = ?")
            params.append(level)
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        base = "SELECT t, level, kind, message, data FROM events"
        rows: list[tuple[Any, ...]] | None = None
        if search and self._fts:
            sql = (
                f"{base} WHERE id IN (SELECT rowid FROM {schema.FTS_TABLE} WHERE {schema.FTS_TABLE} MATCH ?)"
            )
            sql += "".join(f" AND {w}" for w in where)
            try:
                rows = self._query(sql + " ORDER BY t, id", [search, *params], raw_operational=True)
            except sqlite3.OperationalError:
                rows = None  # malformed FTS query, or no FTS5 in this SQLite
        if rows is None:
            if search:
                escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                where.append("message LIKE ? ESCAPE '\\'")
                params.append(f"%{escaped}%")
            sql = base + ("" if not where else " WHERE " + " AND ".join(where))
            rows = self._query(sql + " ORDER BY t, id", params)
        return [Event(t, lv, k, m, schema.loads(d) or {}) for t, lv, k, m, d in rows]

    # -- summary ------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The CONTRACT's `run` JSON object (plus run_id and status)."""
        meta = self._meta()
        settings = self._object_or_refuse("settings", meta.get("settings")) or {}  # a damaged record: said so
        image = self.image_path("final")
        return {
            "run_dir": str(self.path),
            "prompt": settings.get("prompt"),
            "seed": settings.get("seed"),
            "steps": settings.get("steps"),
            "verdict": meta.get("verdict"),
            "first_anomaly": meta.get("first_anomaly"),
            "first_warning": meta.get("first_warning"),
            "image": None if image is None else str(image),
            "elapsed_s": meta.get("elapsed_s"),
            "run_id": self.run_id,
            "status": self._status(meta.get("status")),
        }

    def __repr__(self) -> str:
        return f"RunRecord({str(self.path)!r})"


_MAX_HEADER = 100 * 1024**2  # safetensors' own limit on a header's length
MAX_IMAGE_PIXELS = 8192 * 8192  # below Pillow's bomb warning (~89 M pixels); an 8192×8192 run keeps its image
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def recorded_image(folder: str | Path, relpath: object) -> Path:
    """The file of an image a record names by its relative path (a watched call's input, `{"$image": …}`): inside
    the record's folder, a regular file, no decompression bomb; RecordError (one line) otherwise, before any
    reader decodes it or copies it into a re-run's record."""
    root = Path(folder).resolve()
    target = (root / str(relpath)).resolve()
    if not isinstance(relpath, str) or not target.is_relative_to(root):
        raise RecordError(f"{folder} names an image outside its folder: {str(relpath)[:200]!r}")
    if not target.is_file():
        raise RecordError(f"{folder} is missing its image {relpath}")
    if declared_pixels(target) > MAX_IMAGE_PIXELS:
        raise RecordError(f"{folder}'s image {relpath} declares more than {MAX_IMAGE_PIXELS:,} pixels; refusing it")
    return target


def declared_pixels(path: Path) -> int:
    """Width × height a PNG's header declares (0 for a file that is no PNG: its reader says what is wrong)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(24)
    except OSError:
        return 0
    if len(head) < 24 or not head.startswith(_PNG_SIGNATURE) or head[12:16] != b"IHDR":
        return 0
    width, height = struct.unpack(">II", head[16:24])
    return width * height


def safetensors_header(read: Callable[[int], bytes]) -> dict[str, Any]:
    """The JSON header of a safetensors serialization, from a reader of its first bytes (a file's, a blob's): 8 bytes
    of length, then the header. ValueError when there is none."""
    head = read(8)
    if len(head) != 8:
        raise ValueError("too short for a safetensors header")
    (length,) = struct.unpack("<Q", head)
    if length > _MAX_HEADER:
        raise ValueError("header too large")
    text = read(length)
    if len(text) != length:
        raise ValueError("header cut short")
    header = loads(text, ValueError, "the safetensors header")  # nested too deeply: ValueError, not RecursionError
    if not isinstance(header, dict):
        raise ValueError("header is not an object")
    return header


def _blob_header(conn: sqlite3.Connection, rowid: int) -> dict[str, Any] | None:
    """The safetensors header at the start of a blob, reading no further (None: a value that has none)."""
    try:
        if not hasattr(conn, "blobopen"):  # Python 3.10: the whole blob
            row = conn.execute("SELECT data FROM blobs WHERE rowid = ?", (rowid,)).fetchone()
            return safetensors_header(io.BytesIO(row[0] if isinstance(row[0], bytes) else b"").read)
        with conn.blobopen("blobs", "data", rowid, readonly=True) as blob:
            return safetensors_header(blob.read)
    except (sqlite3.Error, ValueError):  # a value that is no blob, a header that is no JSON
        return None

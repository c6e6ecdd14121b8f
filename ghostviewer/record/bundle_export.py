"""Writing bug-report bundles: run folders -> one zip with a manifest, README.txt and repro.py; with isolated
folders (made by the engine: export --with-inputs), each run's first bad module's inputs under
runs/<run_id>/isolate/."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import tempfile
import time
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save as save_safetensors

import ghostviewer
from ghostviewer.spec import SpecError
from ghostviewer.spec.checks import check_values

from . import schema
from .bundle_format import (
    BUNDLE_VERSION,
    DEFAULT_MAX_SIZE,
    FEATURE_MAP_PREFIXES,
    ISOLATE_FOLDER,
    ISSUE,
    MANIFEST,
    MAX_RATIO,
    PREVIEW_KEYS,
    RATIO_FLOOR,
    README,
    REPRO,
    REPRODUCE,
    RUNS_FOLDER,
    BundleError,
    check_member_name,
)
from .bundle_issue import issue_markdown, reproduction
from .bundle_texts import command_line, readme, repro_script
from .errors import RecordError
from .reader import RunRecord, safetensors_header

_CHUNK = 1024 * 1024
_FILE_MODE = (stat.S_IFREG | 0o644) << 16


@dataclass(frozen=True)
class _Member:
    name: str  # inside the zip
    source: Path | None  # a file to copy ...
    data: bytes | None = None  # ... or bytes made here


# -- what goes in -----------------------------------------------------------------------------------
def _records(run_dirs: Iterable[str | Path]) -> list[RunRecord]:
    records: list[RunRecord] = []
    from .study_reader import study_member_dirs  # a study exports the runs it holds whole

    dirs = [d for run_dir in run_dirs for d in (study_member_dirs(run_dir) or [run_dir])]
    for run_dir in dirs:
        record = RunRecord(run_dir)  # RecordError (one line) when it is not a readable run
        if any(r.run_id == record.run_id for r in records):
            raise BundleError(f"two runs share the id {record.run_id}; a bundle holds each run once")
        records.append(record)
    if not records:
        raise BundleError("no run folders given to export")
    return records


def _safetensors_header(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return safetensors_header(handle.read)
    except (OSError, ValueError) as exc:
        raise RecordError(f"unreadable tensor file {path}: {exc}") from exc


def _kept_keys(path: Path, include_tensors: bool, include_feature_maps: bool, step: int | None) -> list[str] | None:
    """Keys to keep in a tensors file; None keeps the file byte for byte."""
    return _kept_of([k for k in _safetensors_header(path) if k != "__metadata__"], include_tensors,
                    include_feature_maps, step)


def _kept_of(keys: list[str], include_tensors: bool, include_feature_maps: bool, step: int | None) -> list[str] | None:
    kept = keys
    if not include_tensors and step is not None:  # step tensors go; their cheap uint8 previews stay
        kept = [k for k in kept if k in PREVIEW_KEYS]
    if not include_feature_maps:
        kept = [k for k in kept if not k.startswith(FEATURE_MAP_PREFIXES)]
    return None if kept == keys else kept


def _kept_size(path: Path, kept: list[str] | None) -> int:
    if kept is None:
        return path.stat().st_size
    header = _safetensors_header(path)
    data = sum(header[k]["data_offsets"][1] - header[k]["data_offsets"][0] for k in kept)
    return 8 + 64 * (len(kept) + 1) + data  # header size estimated


def _listed_files(record: RunRecord, conn: sqlite3.Connection | None = None) -> list[tuple[str, str, int | None]]:
    rows = (conn.execute("SELECT kind, relpath, step FROM files").fetchall() if conn is not None
            else [(f["kind"], f["relpath"], f["step"]) for f in record.files()])
    out = []
    for kind, relpath, step in rows:
        target = (record.path / relpath).resolve()
        if target.is_relative_to(record.path.resolve()) and target.is_file():
            out.append((kind, relpath, step))
    return out


def estimate_bundle_size(
    run_dirs: Iterable[str | Path], *, include_tensors: bool = True, include_feature_maps: bool = True
) -> int:
    """Bytes the bundle's members take uncompressed (an upper bound: the zip is usually smaller)."""
    total = 16 * 1024  # manifest, README.txt, repro.py
    for record in _records(run_dirs):
        db = record.path / schema.DB_NAME
        total += sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.is_file())
        for kind, relpath, step in _listed_files(record):
            path = record.path / relpath
            if kind == "tensors":
                total += _kept_size(path, _kept_keys(path, include_tensors, include_feature_maps, step))
            else:
                total += path.stat().st_size
        if not (include_tensors and include_feature_maps):  # what leaves the tensors inside the database
            total -= sum(_inline_saving(header, step, include_tensors, include_feature_maps)
                         for step, header in record.inline_tensor_headers())
    return total


def _inline_saving(header: dict[str, Any] | None, step: int | None, include_tensors: bool,
                   include_feature_maps: bool) -> int:
    """Bytes a serialized tensors blob (its safetensors header) loses to the options (0 when it keeps everything)."""
    if header is None:
        return 0  # unreadable: counted whole (an upper bound); exporting says what is wrong
    try:
        keys = [k for k in header if k != "__metadata__"]
        kept = _kept_of(keys, include_tensors, include_feature_maps, step)
        if kept is None:
            return 0
        left = sum(header[k]["data_offsets"][1] - header[k]["data_offsets"][0] for k in keys if k not in kept)
    except (ValueError, TypeError, KeyError, IndexError):
        return 0
    return max(0, left)


# -- the first bad module's inputs (an isolated folder) -----------------------------------------------
def _isolate_members(run_id: str, folder: Path) -> list[_Member]:
    """The files of an isolated folder as runs/<run_id>/isolate/<name>; README.md travels as README.txt (a bundle
    holds no file types beyond its own), anything else of another type is refused."""
    base = f"{RUNS_FOLDER}/{run_id}/{ISOLATE_FOLDER}"
    if not folder.is_dir():
        raise BundleError(f"no isolated folder {folder} for run {run_id}")
    members = []
    for path in sorted(folder.iterdir()):
        if path.name == "__pycache__":
            continue  # repro.py was run there
        if path.is_symlink() or not path.is_file():
            raise BundleError(f"{path} is not a plain file (an isolated folder holds files only)")
        name = path.stem + ".txt" if path.suffix.lower() == ".md" else path.name
        check_member_name(f"{base}/{name}")
        members.append(_Member(f"{base}/{name}", path))
    return members


def _isolate_entry(run_id: str, folder: Path | None, why: str | None, members: list[_Member]) -> dict[str, Any]:
    """The manifest's `isolate` for a run: what was isolated (from its module.json), or why nothing was."""
    if folder is None:
        return {"folder": None, "reason": why or "no module inputs were asked for this run"}
    try:
        meta = json.loads((folder / "module.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"the isolated folder of run {run_id} has no readable module.json: {exc}") from exc
    base = f"{RUNS_FOLDER}/{run_id}/{ISOLATE_FOLDER}"
    names = [m.name for m in members]
    build = meta.get("build") or {}
    repro = f"{base}/repro.py" if f"{base}/repro.py" in names else None
    return {
        "folder": base,
        "module": meta.get("module"),
        "class": meta.get("class"),
        "step": meta.get("step"),
        "call": meta.get("call"),
        "dtype": meta.get("dtype"),
        "rebuildable": bool(meta.get("rebuildable")) and repro is not None,
        "repro": repro,
        "reason": None if repro else (build.get("reason") or "the module cannot be rebuilt outside its pipeline"),
        "output": meta.get("output"),
        "faults": [f.get("name") for f in meta.get("faults") or [] if isinstance(f, dict)],
        "files": names,
    }


# -- the database -----------------------------------------------------------------------------------
def _snapshot(record: RunRecord, target: Path) -> sqlite3.Connection:
    """A consistent single-file copy of run.sqlite (the backup API: safe while a WAL writer is active)."""
    db = (record.path / schema.DB_NAME).resolve()
    try:
        source = sqlite3.connect(db.as_uri() + "?mode=ro", uri=True, timeout=5.0)
        try:
            source.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:  # WAL on read-only media without -shm
            source.close()
            source = sqlite3.connect(db.as_uri() + "?immutable=1", uri=True, timeout=5.0)
        copy = sqlite3.connect(target)
        with source:
            source.backup(copy)
        source.close()
        copy.execute("PRAGMA journal_mode=DELETE")
        extra = schema.foreign_object(copy)
    except sqlite3.Error as exc:
        raise RecordError(f"cannot copy the run database of {record.run_id}: {exc}") from exc
    if extra:  # a bundle that every reader would refuse is never written
        copy.close()
        raise BundleError(f"run {record.run_id} has an unexpected {extra} in its database (GhostViewer never writes "
                          "one: the record was edited); not bundling it")
    return copy


# -- the manifest -----------------------------------------------------------------------------------
def _run_entry(record: RunRecord, options: dict[str, bool]) -> dict[str, Any]:
    settings, recorded_env = record.settings, record.environment
    try:  # values of the wrong kind (a bypass of 5, a prompt that is a number): refused, not a crash in the README
        check_values(settings)
    except SpecError as exc:
        raise BundleError(f"run {record.run_id} records settings that are not valid: {exc}") from None
    environment = {k: v for k, v in recorded_env.items() if k != "pipeline"}
    environment.setdefault("os", recorded_env.get("platform"))
    environment.setdefault("dtype", settings.get("dtype"))
    pipeline = dict(recorded_env.get("pipeline") or {})
    pipeline.setdefault("source", settings.get("source"))
    folder = f"{RUNS_FOLDER}/{record.run_id}"
    image = record.image_path("final")
    return {
        "run_id": record.run_id,
        "folder": folder,
        "created_at": record.created_at,
        "status": record.status,
        "prompt": settings.get("prompt"),
        "negative": settings.get("negative_prompt"),
        "seed": settings.get("seed"),
        "steps": settings.get("steps"),
        "settings": settings,
        "bypasses": list(settings.get("bypass") or []),
        "faults": list(settings.get("faults") or []),
        "verdict": record.verdict,
        "first_anomaly": record.first_anomaly,
        "first_warning": record.first_warning,
        "elapsed_s": record.elapsed_s,
        "error": record.error,
        "recorded_steps": len(record.steps()),
        "image": None if image is None else f"{folder}/images/{image.name}",
        "pipeline": pipeline,
        "environment": environment,
        "command": command_line(settings, folder, watched=bool(record.call)),
        "watched": bool(record.call),  # a call of the user's own code: made again from its record (`replay`)
        "call": {key: record.call.get(key) for key in ("pipeline_class", "kind", "kwargs", "generators", "unrecorded")}
        if record.call else None,  # its keywords, for the diffusers-only reproduction of --issue
        **options,
    }


# -- writing ----------------------------------------------------------------------------------------
def _run_members(record: RunRecord, work: Path, options: dict[str, bool]) -> list[_Member]:
    folder = f"{RUNS_FOLDER}/{record.run_id}"
    work.mkdir()
    conn = _snapshot(record, work / schema.DB_NAME)
    members: list[_Member] = []
    try:
        for kind, relpath, step in _listed_files(record, conn):
            check_member_name(f"{folder}/{relpath}")
            path = record.path / relpath
            kept = (_kept_keys(path, options["include_tensors"], options["include_feature_maps"], step)
                    if kind == "tensors" else None)
            if kept is None:
                members.append(_Member(f"{folder}/{relpath}", path))
            elif kept:  # rewritten without the left-out keys, in the work folder (not in memory)
                slim = work / relpath.replace("/", "__")
                with safe_open(str(path), framework="numpy") as handle:
                    slim.write_bytes(save_safetensors({k: handle.get_tensor(k) for k in kept}))
                members.append(_Member(f"{folder}/{relpath}", slim))
            else:  # nothing left: the file goes, and so does its row in the bundled database
                conn.execute("DELETE FROM files WHERE relpath = ?", (relpath,))
        _slim_inline(conn, options)
        conn.commit()
        conn.execute("VACUUM")
    except sqlite3.Error as exc:
        raise RecordError(f"cannot copy the run database of {record.run_id}: {exc}") from exc
    except (OSError, ValueError, SafetensorError) as exc:
        raise RecordError(f"cannot read the files of run {record.run_id}: {exc}") from exc
    finally:
        conn.close()
    return [_Member(f"{folder}/{schema.DB_NAME}", work / schema.DB_NAME), *members]


def _slim_inline(conn: sqlite3.Connection, options: dict[str, bool]) -> None:
    """The tensors kept inside the bundled database (schema.INLINE_PREFIX): each one read (a corrupt one refuses
    the export, as a corrupt tensors file does) and left out as the options say; blobs no row lists do not travel."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'blobs'").fetchone() is None:
        return  # a record from before tensors were kept inline (or one that lists what it cannot hold)
    prefix = schema.INLINE_PREFIX
    rows = conn.execute("SELECT name, relpath, step FROM files WHERE kind = 'tensors' AND substr(relpath, 1, ?) = ?",
                        (len(prefix), prefix)).fetchall()
    listed = {relpath[len(prefix):] for _, relpath, _ in rows}
    for (blob_name,) in conn.execute("SELECT name FROM blobs").fetchall():
        if blob_name not in listed:
            conn.execute("DELETE FROM blobs WHERE name = ?", (blob_name,))
    for name, relpath, step in rows:
        blob_name = relpath[len(prefix):]  # as the reader finds it
        blob = conn.execute("SELECT data FROM blobs WHERE name = ?", (blob_name,)).fetchone()
        if blob is None:
            continue  # listed but missing: the reader says so, as for a missing file
        if not isinstance(blob[0], bytes):
            raise RecordError(f"unreadable tensors {relpath}: not a safetensors blob")
        arrays = load_safetensors(blob[0])  # unreadable: refused, as an unreadable tensors file is
        kept = _kept_of(list(arrays), options["include_tensors"], options["include_feature_maps"], step)
        if kept:
            conn.execute("UPDATE blobs SET data = ? WHERE name = ?",
                         (save_safetensors({k: arrays[k] for k in kept}), blob_name))
        elif kept is not None:
            conn.execute("DELETE FROM blobs WHERE name = ?", (blob_name,))
            conn.execute("DELETE FROM files WHERE name = ?", (name,))


def _chunks(member: _Member) -> Iterable[bytes]:
    if member.data is not None:
        yield member.data
        return
    assert member.source is not None
    with member.source.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


def _size(member: _Member) -> int:
    return len(member.data) if member.data is not None else member.source.stat().st_size  # type: ignore[union-attr]


def _compression(member: _Member, size: int) -> int:
    """Deflate, unless the member would look like a zip bomb to a reader (all-NaN maps compress ~1000:1)."""
    if size <= RATIO_FLOOR:
        return zipfile.ZIP_DEFLATED
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    packed = sum(len(packer.compress(chunk)) for chunk in _chunks(member)) + len(packer.flush())
    return zipfile.ZIP_STORED if size > MAX_RATIO * max(packed, 1) * 0.9 else zipfile.ZIP_DEFLATED


def _write(zf: zipfile.ZipFile, member: _Member, stamp: tuple[int, ...]) -> dict[str, Any]:
    size = _size(member)
    info = zipfile.ZipInfo(member.name, date_time=stamp[:6])  # type: ignore[arg-type]
    info.external_attr = _FILE_MODE
    info.compress_type = _compression(member, size)
    digest, written = hashlib.sha256(), 0
    with zf.open(info, "w", force_zip64=size > 2**31) as out:
        for chunk in _chunks(member):
            digest.update(chunk)
            out.write(chunk)
            written += len(chunk)
    return {"name": member.name, "size": written, "sha256": digest.hexdigest()}


def export_bundle(
    run_dirs: Iterable[str | Path],
    out_zip: str | Path,
    *,
    include_tensors: bool = True,
    include_feature_maps: bool = True,
    isolated: Mapping[str, str | Path] | None = None,
    not_isolated: Mapping[str, str] | None = None,
    issue_env: str | None = None,
) -> dict[str, Any]:
    """Write a bug-report bundle of the runs; returns {"bundle", "size", "runs"}.

    issue_env: the System Info text of this machine (`ghostviewer env`): the bundle then also holds ISSUE.md, a
    report to paste upstream, and reproduce.py, its diffusers-only reproduction (record/bundle_issue.py).

    include_tensors=False leaves out step tensors (latents, x0, maps; run.sqlite, initial noise, prompt
    tensors, images and the cheap step previews stay); include_feature_maps=False leaves out `fm/*` and
    `attn/*` maps. Weights are never included, only the hashes the run recorded — except an isolated module's.

    isolated: run_id -> a folder `ghostviewer isolate` wrote (the first bad module's inputs, weights, config and
    repro.py; torch makes it, in the engine or `ghostviewer.api.export(with_inputs=True)`), bundled under
    runs/<run_id>/isolate/; not_isolated: run_id -> why a run has none. Either one sets the option
    `with_inputs`, and every run's manifest entry then has `isolate` ({"folder", "module", "step", "repro",
    "reason", "files", ...} or {"folder": None, "reason"}).
    """
    records = _records(run_dirs)
    out = Path(out_zip)
    with_inputs = isolated is not None or not_isolated is not None
    isolated = {str(k): Path(v) for k, v in (isolated or {}).items()}
    ids = {record.run_id for record in records}
    for run_id in isolated:
        if run_id not in ids:
            raise BundleError(f"an isolated folder is given for run {run_id}, which is not exported")
    extra = {run_id: _isolate_members(run_id, folder) for run_id, folder in isolated.items()}
    options = {"include_tensors": bool(include_tensors), "include_feature_maps": bool(include_feature_maps)}
    if with_inputs:
        options["with_inputs"] = True
    if issue_env is not None:
        options["issue"] = True
    now = datetime.now().astimezone()
    stamp = tuple(max(1980, now.year) if i == 0 else v for i, v in enumerate(now.timetuple()[:6]))
    manifest: dict[str, Any] = {
        "bundle_version": BUNDLE_VERSION,
        "created_at": now.isoformat(timespec="seconds"),
        "ghostviewer": ghostviewer.__version__,
        "generator": "ghostviewer export",
        "options": options,
        "runs": [_run_entry(record, options) for record in records],
        "files": [],
    }
    if with_inputs:
        for entry in manifest["runs"]:
            run_id = entry["run_id"]
            entry["isolate"] = _isolate_entry(run_id, isolated.get(run_id), (not_isolated or {}).get(run_id),
                                              extra.get(run_id, []))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(f"cannot create the folder for {out}: {exc.strerror or exc}") from exc
    partial = out.with_name(f".{out.name}.{os.getpid()}.{time.monotonic_ns()}.part")
    try:
        with tempfile.TemporaryDirectory(prefix="ghostviewer-bundle-") as work:
            members = [m for i, r in enumerate(records)
                       for m in [*_run_members(r, Path(work) / str(i), options), *extra.get(r.run_id, [])]]
            total = sum(_size(m) for m in members)
            if total > DEFAULT_MAX_SIZE:
                raise BundleError(
                    f"the bundle would hold {total / 1024**3:.1f} GiB, more than a reader accepts "
                    f"({DEFAULT_MAX_SIZE / 1024**3:.0f} GiB); leave out tensors or feature maps"
                )
            members += [_Member(README, None, readme(manifest).encode()),
                        _Member(REPRO, None, repro_script(manifest).encode())]
            if issue_env is not None:
                members += [_Member(ISSUE, None, issue_markdown(manifest, issue_env).encode()),
                            _Member(REPRODUCE, None, reproduction(manifest["runs"][0]).encode())]
            with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
                manifest["files"] = [_write(zf, m, stamp) for m in members]
                text = json.dumps(schema.jsonable(manifest), indent=1, ensure_ascii=False, allow_nan=False)
                _write(zf, _Member(MANIFEST, None, text.encode()), stamp)
        os.replace(partial, out)
    except OSError as exc:
        raise BundleError(f"cannot write the bundle {out}: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return {
        "bundle": str(out),
        "size": out.stat().st_size,
        "runs": [_summary(entry, record) for entry, record in zip(manifest["runs"], records, strict=True)],
    }


def _summary(entry: dict[str, Any], record: RunRecord) -> dict[str, Any]:
    return {
        "run_dir": str(record.path),
        "run_id": entry["run_id"],
        "prompt": entry["prompt"],
        "seed": entry["seed"],
        "steps": entry["steps"],
        "verdict": entry["verdict"],
        "first_anomaly": entry["first_anomaly"],
        "first_warning": entry.get("first_warning"),
        "status": entry["status"],
        **({"isolate": entry["isolate"]} if "isolate" in entry else {}),
    }

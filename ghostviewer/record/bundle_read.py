"""Reading bug-report bundles, safe by construction: every member is checked (name, type, size, ratio,
sha256, listed in a valid manifest) before anything is written, only inside a new folder, and nothing from
the bundle is ever executed, imported or unpickled."""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import shutil
import sqlite3
import stat
import tempfile
import time
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ghostviewer.safe_read import loads

from . import schema
from .bundle_format import (
    DEFAULT_MAX_SIZE,
    MANIFEST,
    MAX_MANIFEST_SIZE,
    MAX_MEMBERS,
    MAX_RATIO,
    RATIO_FLOOR,
    RUNS_FOLDER,
    BundleError,
    check_layout,
    check_member_name,
    validate_manifest,
)
from .errors import RecordError
from .reader import RunRecord

_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class _Checked:
    zf: zipfile.ZipFile
    manifest: dict[str, Any]
    members: dict[str, tuple[zipfile.ZipInfo, dict[str, Any]]]  # name -> (zip entry, manifest entry)


def _refuse_constant(name: str) -> Any:
    raise BundleError(f"bad bundle manifest: {name} is not valid JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 is valid JSON, but no number GhostViewer writes (nor JSON can write back)
        raise BundleError(f"bad bundle manifest: {text[:40]} is not a finite number")
    return value


def _open_zip(path: Path) -> zipfile.ZipFile:
    if not path.is_file():
        from .study_reader import not_kept_reason

        raise BundleError(not_kept_reason(path) or f"{'not a bundle file' if path.exists() else 'no such bundle'}: "
                          f"{path}")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise BundleError(f"{path.name} is not a GhostViewer bundle (not a readable zip file: {exc})") from exc


def _check_entries(zf: zipfile.ZipFile, max_size: int) -> tuple[dict[str, zipfile.ZipInfo], set[str]]:
    """Names, types, duplicates, sizes and ratios of the central directory; nothing is decompressed."""
    files: dict[str, zipfile.ZipInfo] = {}
    folders: set[str] = set()
    seen: set[str] = set()
    total = 0
    if len(zf.infolist()) > MAX_MEMBERS:
        raise BundleError(f"bundle has more than {MAX_MEMBERS} members; refusing it")
    for info in zf.infolist():
        name = info.filename
        is_dir = name.endswith("/")
        check_member_name(name[:-1] if is_dir else name, directory=is_dir)
        if name.lower() in seen:
            raise BundleError(f"bundle member {ascii(name)} appears twice")
        seen.add(name.lower())
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind and kind != (stat.S_IFDIR if is_dir else stat.S_IFREG):
            raise BundleError(f"bundle member {ascii(name)} is a link or a device file, not a plain file")
        if info.flag_bits & 0x1:
            raise BundleError(f"bundle member {ascii(name)} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise BundleError(f"bundle member {ascii(name)} uses an unsupported compression method")
        if is_dir:
            folders.add(name[:-1])
            continue
        total += info.file_size
        if total > max_size:
            raise BundleError(f"bundle unpacks to more than {max_size} bytes (the limit); refusing it")
        if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise BundleError(
                f"bundle member {ascii(name)} compresses more than {MAX_RATIO}:1 (a zip bomb?); refusing it"
            )
        files[name] = info
    packed = sum(info.compress_size for info in files.values())
    if total > RATIO_FLOOR and total > MAX_RATIO * max(packed, 1):  # many small members of zeros add up too
        raise BundleError(f"bundle unpacks {total / max(packed, 1):.0f}:1, more than {MAX_RATIO}:1 in all "
                          "(a zip bomb?); refusing it")
    return files, folders


def _read_manifest(zf: zipfile.ZipFile, info: zipfile.ZipInfo | None) -> dict[str, Any]:
    if info is None:
        raise BundleError("not a GhostViewer bundle (no manifest.json)")
    if info.file_size > MAX_MANIFEST_SIZE:
        raise BundleError("bad bundle manifest: manifest.json is too large")
    data = b"".join(_verified_chunks(zf, info, None))
    manifest = loads(data, BundleError, "bad bundle manifest: manifest.json", parse_constant=_refuse_constant,
                     parse_float=_finite)
    return validate_manifest(manifest)


def check_bundle(zip_path: str | Path, max_size: int = DEFAULT_MAX_SIZE) -> _Checked:
    """Open a bundle and check everything but the members' contents (see _verified_chunks for those)."""
    zf = _open_zip(Path(zip_path))
    try:
        files, folders = _check_entries(zf, max_size)
        manifest = _read_manifest(zf, files.pop(MANIFEST, None))
        listed = {entry["name"]: entry for entry in manifest["files"]}
        run_ids = {run["run_id"] for run in manifest["runs"]}
        for name in files:
            if name not in listed:
                raise BundleError(f"bundle member {ascii(name)} is not listed in its manifest")
        for name, entry in listed.items():
            if name not in files:
                raise BundleError(f"bundle is missing {name}, which its manifest lists")
            check_layout(name, run_ids)
            if files[name].file_size != entry["size"]:
                raise BundleError(f"bundle member {name} does not have the size its manifest gives")
        parents = {"/".join(name.split("/")[:i]) for name in listed for i in range(1, name.count("/") + 1)}
        for folder in folders - parents:
            raise BundleError(f"bundle member {ascii(folder + '/')} is not listed in its manifest")
        return _Checked(zf, manifest, {name: (files[name], entry) for name, entry in listed.items()})
    except BaseException:
        zf.close()
        raise


def _verified_chunks(zf: zipfile.ZipFile, info: zipfile.ZipInfo, entry: dict[str, Any] | None) -> Iterator[bytes]:
    """The member's bytes; BundleError when it is corrupt, longer than declared, or not the manifest's sha256."""
    digest, count = hashlib.sha256(), 0
    try:
        with zf.open(info) as handle:
            while chunk := handle.read(_CHUNK):
                count += len(chunk)
                if count > info.file_size:
                    raise BundleError(f"bundle member {info.filename} is longer than it says")
                digest.update(chunk)
                yield chunk
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
        raise BundleError(f"bundle member {info.filename} is corrupt ({exc})") from exc
    if entry is not None and (count != entry["size"] or digest.hexdigest() != entry["sha256"]):
        raise BundleError(f"bundle member {info.filename} does not match its sha256 in the manifest (tampered?)")


def _run_summary(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_dir": run.get("folder") or f"{RUNS_FOLDER}/{run['run_id']}",
        "run_id": run["run_id"],
        "prompt": run.get("prompt"),
        "seed": run.get("seed"),
        "steps": run.get("steps"),
        "verdict": run.get("verdict"),
        "first_anomaly": run.get("first_anomaly"),
        "first_warning": run.get("first_warning"),
        "image": run.get("image"),
        "elapsed_s": run.get("elapsed_s"),
        "status": run["status"],
        **({"isolate": run["isolate"]} if "isolate" in run else {}),  # export --with-inputs
    }


def inspect_bundle(zip_path: str | Path, *, max_size: int = DEFAULT_MAX_SIZE) -> dict[str, Any]:
    """The CONTRACT's `inspect` dict: {"manifest", "runs", "files"}, every member checked; writes nothing."""
    checked = check_bundle(zip_path, max_size)
    with checked.zf:
        for info, entry in checked.members.values():
            for _ in _verified_chunks(checked.zf, info, entry):
                pass
        _check_databases(checked)
    manifest = checked.manifest
    return {
        "manifest": manifest,
        "runs": [_run_summary(run) for run in manifest["runs"]],
        "files": manifest["files"],
        "bundle": str(zip_path),
        "size": Path(zip_path).stat().st_size,
    }


def _new_folder(dest_dir: Path, stem: str) -> Path:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", stem).strip("._")[:60] or "bundle"
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            folder = dest_dir / f"{base}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            return folder
    except OSError as exc:
        raise BundleError(f"cannot create a folder in {dest_dir}: {exc.strerror or exc}") from exc
    raise BundleError(f"cannot find a free folder name in {dest_dir}")


def _extract(checked: _Checked, folder: Path) -> None:
    root = folder.resolve()
    for name, (info, entry) in checked.members.items():
        target = folder.joinpath(*name.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.parent.resolve().is_relative_to(root):
            raise BundleError(f"bundle member {name} would land outside its folder")
        with target.open("xb") as out:  # exclusive: never overwrites, never follows a link
            for chunk in _verified_chunks(checked.zf, info, entry):
                out.write(chunk)


def _check_run(path: Path, run_id: str, entry: dict[str, Any] | None = None) -> None:
    """The bundled database holds tables only (schema.foreign_object: no view, trigger, generated column or virtual
    table of its own), reads as a run (its tensors too), and says what the manifest's entry for it (when given) says
    of its verdict, first anomaly and settings (the prompt, seed and steps inspect shows are the manifest's copy)."""
    db = path / schema.DB_NAME
    try:
        conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            conn.execute("PRAGMA trusted_schema=OFF")
            extra = schema.foreign_object(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise BundleError(f"bundled run {run_id} has an unreadable database ({exc})") from exc
    if extra:
        raise BundleError(f"bundled run {run_id} has an unexpected {extra} in its database; refusing it")
    try:
        record = RunRecord(path)
        recorded = (record.verdict or {}).get("label"), record.first_anomaly
        settings, status = record.settings, record.status
        record.check_tensors()  # a safetensors header that lies is said now, not when a view reads that step
    except RecordError as exc:
        raise BundleError(f"bundled run {run_id} is not readable: {exc}") from exc
    if entry is None:
        return
    if ((entry.get("verdict") or {}).get("label"), entry.get("first_anomaly")) != recorded:
        said = (entry.get("verdict") or {}).get("label")
        raise BundleError(f"bundled run {run_id}: the manifest says verdict {said!r} but the run's own database says "
                          f"{recorded[0]!r} (or another first anomaly): the bundle was edited; refusing it")
    claims = {"settings": entry.get("settings"), **{key: entry.get(key) for key in ("prompt", "seed", "steps")}}
    if claims != {"settings": settings, **{key: settings.get(key) for key in ("prompt", "seed", "steps")}}:
        raise BundleError(f"bundled run {run_id}: the manifest's settings (prompt, seed, steps) are not the run's "
                          "own database's: the bundle was edited; refusing it")
    # inspect's exit code follows the status; a run exported while running reads interrupted once out of its folder
    claimed = "interrupted" if entry.get("status") == "running" else entry.get("status")
    if claimed != status:
        raise BundleError(f"bundled run {run_id}: the manifest says status {entry.get('status')!r} but the run's own "
                          f"database says {status!r}: the bundle was edited; refusing it")


def _check_databases(checked: _Checked) -> None:
    """Each bundled run's database, read from a scratch copy: inspect says what the runs recorded, not what a
    manifest claims of them."""
    for run in checked.manifest["runs"]:
        member = checked.members.get(f"{RUNS_FOLDER}/{run['run_id']}/{schema.DB_NAME}")
        if member is None:
            continue
        with tempfile.TemporaryDirectory(prefix="ghostviewer-inspect-") as scratch:
            folder = Path(scratch)
            with (folder / schema.DB_NAME).open("xb") as out:
                for chunk in _verified_chunks(checked.zf, *member):
                    out.write(chunk)
            _check_run(folder, run["run_id"], run)


def open_bundle(zip_path: str | Path, dest_dir: str | Path, *, max_size: int = DEFAULT_MAX_SIZE) -> list[Path]:
    """Check and extract a bundle into a NEW folder under dest_dir; returns its run folders (RunRecord reads
    them). On any refusal nothing is left behind."""
    zip_path = Path(zip_path)
    checked = check_bundle(zip_path, max_size)
    with checked.zf:
        folder = _new_folder(Path(dest_dir), zip_path.stem)
        try:
            _extract(checked, folder)
            runs = [folder / RUNS_FOLDER / run["run_id"] for run in checked.manifest["runs"]]
            for run, path in zip(checked.manifest["runs"], runs, strict=True):
                _check_run(path, run["run_id"], run)
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise BundleError(f"cannot extract {zip_path.name} into {folder}: {exc.strerror or exc}") from exc
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    return runs

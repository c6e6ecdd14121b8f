"""The bug-report bundle format: version, limits, member names and the manifest's shape (shared by export
and read). A bundle is a zip: manifest.json, README.txt, repro.py and runs/<run_id>/{run.sqlite, tensors/,
images/}, and with `--with-inputs` runs/<run_id>/isolate/ (the first bad module's real inputs, weights, config and
standalone repro.py, as `ghostviewer isolate` writes them). Torch-free and Qt-free."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from .errors import RecordError

BUNDLE_VERSION = 1
MANIFEST = "manifest.json"
README = "README.txt"
REPRO = "repro.py"
ISSUE = "ISSUE.md"  # export --issue: a report to paste upstream
REPRODUCE = "reproduce.py"  # export --issue: its reproduction, diffusers only
RUNS_FOLDER = "runs"
ISOLATE_FOLDER = "isolate"  # runs/<run_id>/isolate/: the first bad module's inputs (export --with-inputs)
ALLOWED_SUFFIXES = (".sqlite", ".safetensors", ".png", ".json", ".txt", ".py", ".md")
DEFAULT_MAX_SIZE = 2 * 1024**3  # total uncompressed bytes a reader accepts
MAX_RATIO = 200  # uncompressed:compressed, for members over RATIO_FLOOR bytes
RATIO_FLOOR = 1024**2
MAX_MANIFEST_SIZE = 16 * 1024**2
MAX_MEMBERS = 100_000
FEATURE_MAP_PREFIXES = ("fm/", "attn/")  # captured feature maps and cross-attention maps in step tensors
PREVIEW_KEYS = ("preview", "latents_preview")  # cheap uint8 previews kept when step tensors are left out

# \Z: a name ending in a newline does not match; 255 characters: a file name's limit
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}\Z")
MAX_DEPTH = 8  # runs/<run_id>/isolate/<file> is the deepest GhostViewer writes
# The only Python a bundle holds is what GhostViewer writes: anything else (a `torch.py` beside repro.py) would run
# in place of the module it shadows when the user runs the repro.
_PYTHON = re.compile(rf"({REPRO}|{REPRODUCE}|{RUNS_FOLDER}/[^/]+/{ISOLATE_FOLDER}/{REPRO})\Z".replace(".py", r"\.py"))
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


class BundleError(RecordError):
    """A bundle cannot be written or is refused on reading; the message is one clear line for the user."""


def check_member_name(name: str, directory: bool = False) -> PurePosixPath:
    """A safe, relative, forward-slash member name with an allowed suffix (none for a directory entry)."""
    if not isinstance(name, str) or not name:
        raise BundleError("bundle has a member with an empty name")
    shown = ascii(name)
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise BundleError(f"bundle member {shown} has an absolute path")
    if "\\" in name:
        raise BundleError(f"bundle member {shown} has a backslash in its name")
    parts = name.split("/")
    if ".." in parts:
        raise BundleError(f"bundle member {shown} points outside the bundle ('..')")
    if len(parts) > MAX_DEPTH or not all(_PART.match(part) for part in parts):
        raise BundleError(f"bundle member {shown[:200]} has a name GhostViewer does not write")
    path = PurePosixPath(name)
    if not directory and path.suffix.lower() not in ALLOWED_SUFFIXES:
        raise BundleError(f"bundle member {shown} is not an expected file type ({', '.join(ALLOWED_SUFFIXES)})")
    if not directory and path.suffix.lower() == ".py" and not _PYTHON.match(name):
        raise BundleError(f"bundle member {shown} is Python code GhostViewer does not write (only {REPRO}, "
                          f"{REPRODUCE} and a run's {ISOLATE_FOLDER}/{REPRO}); refusing it")
    return path


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise BundleError(f"bad bundle manifest: {what}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_manifest(manifest: Any) -> dict[str, Any]:
    """Check the manifest's keys and types and its bundle_version (a newer one is refused)."""
    _need(isinstance(manifest, dict), "not a JSON object")
    version = manifest.get("bundle_version")
    _need(_is_int(version) and version >= 1, "no valid bundle_version")
    if version > BUNDLE_VERSION:
        raise BundleError(
            f"bundle was made by a newer GhostViewer (bundle version {version}; this one reads {BUNDLE_VERSION})"
        )
    for key in ("created_at", "ghostviewer"):
        _need(isinstance(manifest.get(key), str), f"{key} must be text")
    runs, files = manifest.get("runs"), manifest.get("files")
    _need(isinstance(runs, list) and len(runs) > 0, "runs must be a non-empty list")
    _need(isinstance(files, list), "files must be a list")
    seen: set[str] = set()
    for run in runs:
        _need(isinstance(run, dict), "each run must be an object")
        run_id = run.get("run_id")
        _need(isinstance(run_id, str) and bool(_PART.match(run_id)), f"bad run_id {run_id!r}")
        _need(run_id not in seen, f"run {run_id} is listed twice")
        seen.add(run_id)
        for key in ("settings", "pipeline", "environment"):
            _need(isinstance(run.get(key), dict), f"run {run_id}: {key} must be an object")
        for key in ("verdict", "first_anomaly", "first_warning", "isolate"):
            _need(run.get(key) is None or isinstance(run[key], dict), f"run {run_id}: {key} must be an object")
        folder = (run.get("isolate") or {}).get("folder")
        _need(folder is None or folder == f"{RUNS_FOLDER}/{run_id}/{ISOLATE_FOLDER}",
              f"run {run_id}: isolate folder must be {RUNS_FOLDER}/{run_id}/{ISOLATE_FOLDER}")
        anomaly = run.get("first_anomaly")
        if anomaly is not None:
            _need(all(isinstance(anomaly.get(key), str) for key in ("phase", "module", "kind"))
                  and (anomaly.get("step") is None or _is_int(anomaly["step"])),
                  f"run {run_id}: first_anomaly needs phase, module and kind as text and a whole step")
        verdict = run.get("verdict")
        _need(verdict is None or isinstance(verdict.get("label"), str), f"run {run_id}: the verdict needs a label")
        isolate_files = (run.get("isolate") or {}).get("files")
        names_ok = isinstance(isolate_files, list) and all(isinstance(f, str) for f in isolate_files)
        _need(isolate_files is None or names_ok, f"run {run_id}: isolate files must be a list of names")
        _need(run.get("command") is None or isinstance(run["command"], str), f"run {run_id}: command must be text")
        _need(isinstance(run.get("status"), str), f"run {run_id}: status must be text")
        _need(run.get("seed") is None or _is_int(run["seed"]), f"run {run_id}: seed must be a whole number")
        _need(run.get("prompt") is None or isinstance(run["prompt"], str), f"run {run_id}: prompt must be text")
    names: set[str] = set()
    for entry in files:
        _need(isinstance(entry, dict), "each file must be an object")
        name, size, digest = entry.get("name"), entry.get("size"), entry.get("sha256")
        _need(isinstance(name, str), "a file has no name")
        check_member_name(name)
        _need(name != MANIFEST, "manifest.json cannot list itself")
        _need(name.lower() not in names, f"{name} is listed twice")
        names.add(name.lower())
        _need(_is_int(size) and size >= 0, f"{name}: size must be a whole number")
        _need(isinstance(digest, str) and bool(_SHA256.match(digest)), f"{name}: sha256 must be 64 hex digits")
    for run_id in seen:
        _need(f"{RUNS_FOLDER}/{run_id}/run.sqlite".lower() in names, f"run {run_id} has no run.sqlite")
    return manifest


def check_layout(name: str, run_ids: set[str]) -> None:
    """Top-level files, or files inside runs/<run_id>/ of a run the manifest lists."""
    parts = name.split("/")
    if len(parts) == 1:
        return
    if parts[0] != RUNS_FOLDER or len(parts) < 3 or parts[1] not in run_ids:
        raise BundleError(f"bundle member {ascii(name)} is outside the runs the manifest lists")

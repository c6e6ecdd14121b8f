"""Comparing two recorded runs: where they first diverge, module by module and step by step, and by how much.

Every traced output is recorded with its statistics and a fingerprint (its bit patterns summed with position
weights, mod 2**32), so two outputs are *the same* when shape, dtype, fingerprint, min, max and counts match —
bit-identical in practice, not "close" (mean and std are then not compared: they could differ only in how a
GhostViewer version summed them). Runs whose fingerprints were made differently compare by statistics.
Outputs are matched by (phase, step, module, call) and visited in the first run's execution order, so
the first divergence is the earliest output that differs: for a block that adds unseeded noise it is that block,
not the blocks downstream of it. Runs recorded before fingerprints existed compare by statistics, then by the
step tensors (latents, x0) and the final image, bit for bit. Reads the records alone: no torch.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ghostviewer.record import RunRecord, StatRow
from ghostviewer.record.types import CALLBACK_LATENTS, PHASE_ORDER, same_fingerprint

Key = tuple[str, int | None, str, int]  # (phase, step, module, call)
_COMPARED = ("min", "max", "mean", "std", "absmax", "nan_count", "inf_count")
_EXACT = ("min", "max", "absmax", "nan_count", "inf_count")  # the same whichever way a version reduces
# Settings that say how a run was made but not what it computes: never reported as a difference.
_IGNORED_SETTINGS = frozenset({"source"})


def same_bits(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _same_value(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def rows_differ(a: StatRow, b: StatRow) -> str | None:
    """The first thing that tells two outputs apart ('shape', 'dtype', 'fingerprint', a stat name), or None."""
    if a.shape != b.shape:
        return "shape"
    if a.dtype != b.dtype:
        return "dtype"
    fingerprints = a.fingerprint is not None and b.fingerprint is not None
    if fingerprints and not same_fingerprint(a.fingerprint, b.fingerprint):  # type: ignore[arg-type]
        return "fingerprint"
    # With equal fingerprints the bits are the same: mean and std could then differ only in how a GhostViewer
    # version summed them (its last float32 bits), which says nothing about the run.
    for name in _EXACT if fingerprints else _COMPARED:
        if not _same_value(float(getattr(a, name)), float(getattr(b, name))):
            return name
    return None


def _key(row: StatRow) -> Key:
    return (row.phase, row.step, row.module, row.call)


def _where(row: StatRow, what: str) -> dict[str, Any]:
    return {"phase": row.phase, "step": row.step, "module": row.module, "call": row.call, "what": what}


def first_stat_divergence(rows_a: list[StatRow], rows_b: list[StatRow]) -> dict[str, Any] | None:
    """The earliest output (in run A's execution order) that differs in B or is missing from it; then the
    earliest output of B that A does not have. None when every recorded output matches. The latents a caller's
    step callback handed back are an observation of the caller's code, not an output: missing from a run made
    without that callback, they are no difference (what the callback changed shows in the next step's rows)."""
    by_key = {_key(r): r for r in rows_b}
    for row in rows_a:
        other = by_key.pop(_key(row), None)
        if other is None:
            if row.module == CALLBACK_LATENTS:
                continue
            return _where(row, "missing in the second run")
        what = rows_differ(row, other)
        if what is not None:
            return _where(row, what)
    extra = [r for r in by_key.values() if r.module != CALLBACK_LATENTS]
    if extra:
        first = min(extra, key=lambda r: r.seq)
        return _where(first, "missing in the first run")
    return None


def relative_delta(a: float, b: float) -> float:
    """|a − b| scaled by the larger magnitude; 0 when equal, inf when exactly one is non-finite."""
    if _same_value(a, b):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def module_deltas(rows_a: list[StatRow], rows_b: list[StatRow], stat: str = "std") -> dict[str, float]:
    """Per module (call 0): the largest relative difference of one statistic over all phases and steps."""
    by_key = {_key(r): r for r in rows_b if r.call == 0}
    out: dict[str, float] = {}
    for row in rows_a:
        other = by_key.get(_key(row))
        if row.call != 0 or other is None:
            continue
        delta = relative_delta(float(getattr(row, stat)), float(getattr(other, stat)))
        out[row.module] = max(out.get(row.module, 0.0), delta)
    return out


def settings_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[Any]]:
    """{setting: [value in A, value in B]} for every setting that differs."""
    keys = sorted((set(a) | set(b)) - _IGNORED_SETTINGS)
    return {k: [a.get(k), b.get(k)] for k in keys if a.get(k) != b.get(k)}


def component_settings(environment: dict[str, Any]) -> dict[str, Any]:
    """A run's components' classes and config keys as settings: {"scheduler.class": "EulerDiscreteScheduler",
    "scheduler.final_sigmas_type": "zero", …} (recorded by the engine since component configs were; else the
    classes alone, from the pipeline's description)."""
    configs = environment.get("component_configs")
    if not isinstance(configs, dict):
        components = (environment.get("pipeline") or {}).get("components") or {}
        configs = {n: {"_class": c.get("class")} for n, c in components.items() if isinstance(c, dict)}
    found: dict[str, Any] = {}
    for name, config in configs.items():
        if isinstance(config, dict):
            for key, value in config.items():
                found[f"{name}.{'class' if key == '_class' else key}"] = value
    return found


def component_settings_pair(env_a: dict[str, Any], env_b: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both runs' component_settings, less the config keys of a component whose config only one run recorded (a
    transformers text encoder's were not recorded before 2026-12): its class still compares."""
    a, b = component_settings(env_a), component_settings(env_b)
    keyed = [{k.split(".", 1)[0] for k in side if not k.endswith(".class")} for side in (a, b)]
    one_sided = keyed[0] ^ keyed[1]

    def kept(side: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in side.items() if k.endswith(".class") or k.split(".", 1)[0] not in one_sided}

    return kept(a), kept(b)


def run_settings_diff(a: RunRecord, b: RunRecord) -> dict[str, list[Any]]:
    """settings_diff over the recorded settings and every component's class and config key."""
    configs_a, configs_b = component_settings_pair(a.environment, b.environment)
    return settings_diff({**dict(a.settings), **configs_a}, {**dict(b.settings), **configs_b})


def environment_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[Any]]:
    """Versions, device, threads and determinism flags that differ between two runs' environments."""
    flat_a = {**{k: v for k, v in a.items() if not isinstance(v, dict)}, **(a.get("determinism") or {})}
    flat_b = {**{k: v for k, v in b.items() if not isinstance(v, dict)}, **(b.get("determinism") or {})}
    return settings_diff(flat_a, flat_b)


def _pixels(record: RunRecord) -> np.ndarray | None:
    path = record.image_path("final")
    if path is None:
        return None
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGBA"))
    except OSError:
        return None


def _tensor_divergence(a: RunRecord, b: RunRecord) -> dict[str, Any] | None:
    """Step tensors (where both runs kept them) and the final image, bit for bit (for runs whose stats cannot
    tell)."""
    steps_a, steps_b = [s.index for s in a.steps()], [s.index for s in b.steps()]
    for step in steps_a:
        if step not in steps_b:
            return {"phase": "denoise", "step": step, "module": None, "what": "step missing in the second run"}
        ta, tb = a.step_tensors(step), b.step_tensors(step)
        for name in ("latents", "x0"):
            # A step one run kept no tensors of (a sweep's run keeps every k-th) tells nothing either way.
            if name in ta and name in tb and not same_bits(ta[name], tb[name]):
                return {"phase": "denoise", "step": step, "module": None, "what": name}
    extra = sorted(set(steps_b) - set(steps_a))
    if extra:
        return {"phase": "denoise", "step": extra[0], "module": None, "what": "step missing in the first run"}
    if not same_bits(_pixels(a), _pixels(b)):
        return {"phase": "decode", "step": None, "module": None, "what": "final image"}
    return None


def comparable_stats(a: RunRecord, b: RunRecord) -> tuple[list[StatRow], list[StatRow]]:
    """Both runs' rows, fingerprints dropped when the two runs made them differently (another GhostViewer
    version): they then compare by statistics, as runs recorded before fingerprints do."""
    rows_a, rows_b = a.stats(), b.stats()
    if a.fingerprint_kind != b.fingerprint_kind:
        rows_a = [replace(row, fingerprint=None) for row in rows_a]
        rows_b = [replace(row, fingerprint=None) for row in rows_b]
    return rows_a, rows_b


def first_divergence(a: RunRecord, b: RunRecord) -> dict[str, Any] | None:
    """Where two recorded runs first differ: {"phase", "step", "module", "call", "what"}, or None."""
    return first_stat_divergence(*comparable_stats(a, b)) or _tensor_divergence(a, b)


def compare_records(a: RunRecord, b: RunRecord) -> dict[str, Any]:
    """CONTRACT's `compare` dict, with the per-module deltas and the two environments' differences."""
    rows_a, rows_b = comparable_stats(a, b)
    divergence = first_stat_divergence(rows_a, rows_b) or _tensor_divergence(a, b)
    verdict_a, verdict_b = a.verdict or {}, b.verdict or {}
    return {
        "same": divergence is None,
        "run_a": str(a.path),
        "run_b": str(b.path),
        "settings_diff": run_settings_diff(a, b),
        "environment_diff": environment_diff(a.environment, b.environment),
        "first_divergence": divergence,
        "verdicts": [verdict_a.get("label"), verdict_b.get("label")],
        "first_anomalies": [a.first_anomaly, b.first_anomaly],
        "module_deltas": {m: (d if math.isfinite(d) else None) for m, d in module_deltas(rows_a, rows_b).items()},
        "steps": [len(a.steps()), len(b.steps())],
    }


def compare(run_a: str | Path, run_b: str | Path) -> dict[str, Any]:
    """Compare two run folders (RecordError when either cannot be read)."""
    return compare_records(RunRecord(run_a), RunRecord(run_b))


def compare_runs(original: str | Path, replay: str | Path) -> dict[str, Any]:
    """Did a replay reproduce its original? {"reproduced", "seed", "steps", "first_divergence", ...}."""
    a, b = RunRecord(original), RunRecord(replay)
    divergence = first_divergence(a, b)
    return {
        "original": str(a.path),
        "replay": str(b.path),
        "seed": a.settings.get("seed"),
        "steps": len(a.steps()),
        "reproduced": divergence is None,
        "first_divergence": divergence,
        "environment_diff": environment_diff(a.environment, b.environment),
    }


def describe_divergence(divergence: dict[str, Any]) -> str:
    """One line: 'unet.mid_block (fingerprint) at denoise step 3'."""
    what = divergence.get("what")
    module = divergence.get("module")
    head = f"{module} ({what})" if module else str(what)
    step = divergence.get("step")
    where = divergence.get("phase") if step is None else f"{divergence.get('phase')} step {step}"
    return f"{head} at {where}"


Column = tuple[str, int | None]  # (phase, step): ("encode", None), ("denoise", 0), …, ("decode", None)


def delta_grid(
    rows_a: list[StatRow], rows_b: list[StatRow], stat: str = "std"
) -> tuple[list[str], list[Column], np.ndarray, np.ndarray]:
    """Module × (phase, step) grid of how much two runs differ: (modules, columns, values, differs).

    modules: rows, in run A's execution order (then B's extra ones); columns: encode, the denoise steps, decode
    (only those recorded). values: the largest relative delta of `stat` over the cell's calls (relative_delta:
    0 equal, inf when exactly one side is non-finite), NaN where either run lacks the output. differs: True
    where the outputs are not the same (rows_differ: shape, dtype, fingerprint or any statistic), so a cell
    can differ bit for bit while its `stat` is equal."""
    by_key = {_key(r): r for r in rows_b}
    modules = list(dict.fromkeys([r.module for r in rows_a] + [r.module for r in rows_b]))
    columns = sorted({(r.phase, r.step) for r in [*rows_a, *rows_b]},
                     key=lambda c: (PHASE_ORDER.get(c[0], 3), -1 if c[1] is None else c[1]))
    row_of = {m: i for i, m in enumerate(modules)}
    col_of = {c: j for j, c in enumerate(columns)}
    values = np.full((len(modules), len(columns)), np.nan)
    differs = np.zeros(values.shape, bool)
    for row in rows_a:
        other = by_key.get(_key(row))
        if other is None:
            continue
        i, j = row_of[row.module], col_of[(row.phase, row.step)]
        delta = relative_delta(float(getattr(row, stat)), float(getattr(other, stat)))
        values[i, j] = delta if np.isnan(values[i, j]) else max(values[i, j], delta)
        differs[i, j] |= rows_differ(row, other) is not None
    return modules, columns, values, differs

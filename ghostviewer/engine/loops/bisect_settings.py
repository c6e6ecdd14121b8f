"""Settings bisection: of the settings that differ between a good and a bad run, the fewest that make it bad.

Two runs that differ in several settings (dtype per component, scheduler, guidance, size, steps, prompt, seed,
device, bypasses, faults) — which difference is the bug? Each re-run takes the bad run's settings with a
subset of the differences swapped for the good run's values, and asks whether the bad run's symptom is still
there (analysis.symptom: the same oracle as bisection by bypass). Delta debugging (analysis.ddmin) finds a
1-minimal set of differences that keeps the symptom.

A per-component dtype (`float32,vae=float16`) is split into one difference per component whose dtype differs,
when more than one does: "float16 everywhere" against "float32" then comes out as "the VAE in float16". Each
dtype is loaded once through PipelineCache, so a bisection over dtypes loads each combination it tries once.
Settings that only change what is recorded (captures, trace depth, attention maps) are not bisected: they are
taken from the bad run and listed under `ignored`, with the pipeline source (always the bad run's).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ghostviewer.analysis.compare import component_settings, settings_diff
from ghostviewer.analysis.ddmin import ddmin
from ghostviewer.analysis.symptom import Symptom
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops.bisect_trials import BisectionCancelled, ProgressFn, Trials, quiet
from ghostviewer.engine.loops.recorded import PipelineCache, open_recorded
from ghostviewer.engine.run.baseline_lookup import format_dtypes
from ghostviewer.engine.run.runner import CancelToken
from ghostviewer.engine.tracing.blocks import pipeline_components
from ghostviewer.record import StudyWriter
from ghostviewer.spec import RunSpec

RECORDING_ONLY = frozenset({"capture", "trace_depth", "capture_attention", "extra", "source"})
_DTYPE = "dtype"


def per_component(spec: str | None, components: list[str]) -> dict[str, str] | None:
    """'float32,vae=float16' → {component: dtype} over `components`; None when the spec cannot be read."""
    default, overrides = "float32", {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        if sep:
            overrides[name.strip()] = value.strip()
        else:
            default = name
    if set(overrides) - set(components):
        return None
    return {c: overrides.get(c, default) for c in components}


def differences(bad: RunSpec, good: RunSpec, components: list[str]) -> tuple[list[str], dict[str, Any]]:
    """(the bisected differences, the ignored ones). A difference is a setting name, or 'dtype:COMPONENT'."""
    diff = settings_diff(good.to_dict(), bad.to_dict())
    ignored = {k: v for k, v in diff.items() if k in RECORDING_ONLY}
    units: list[str] = []
    for key in diff:
        if key in RECORDING_ONLY:
            continue
        if key == _DTYPE:
            ours, theirs = per_component(bad.dtype, components), per_component(good.dtype, components)
            split = [c for c in components if ours and theirs and ours[c] != theirs[c]]
            if len(split) > 1:
                units.extend(f"{_DTYPE}:{c}" for c in split)
                continue
        units.append(key)
    return units, ignored


def compose(
    bad: RunSpec, good: RunSpec, kept: list[str], units: list[str], components: list[str]
) -> RunSpec:
    """The bad run's settings with every difference not in `kept` taken from the good run."""
    data = bad.to_dict()
    theirs = good.to_dict()
    for unit in units:
        if unit not in kept and not unit.startswith(f"{_DTYPE}:"):
            data[unit] = theirs[unit]
    split_parts = [u.split(":", 1)[1] for u in units if u.startswith(f"{_DTYPE}:")]
    if split_parts:
        kept_parts = {u.split(":", 1)[1] for u in kept if u.startswith(f"{_DTYPE}:")}
        if kept_parts == set(split_parts):
            data[_DTYPE] = bad.dtype
        elif not kept_parts:
            data[_DTYPE] = good.dtype
        else:
            ours, base = per_component(bad.dtype, components), per_component(good.dtype, components)
            assert ours is not None and base is not None  # split only when both were readable
            mixed = {c: ours[c] if c in kept_parts else base[c] for c in components}
            data[_DTYPE] = format_dtypes(mixed, prefer=Counter(base.values()).most_common(1)[0][0])
    return RunSpec.from_dict(data)


def _shown(settings: RunSpec, key: str) -> Any:
    value = settings.to_dict()[key]
    return value or "float32" if key == _DTYPE else value  # no dtype given means float32


def _as_run(settings: RunSpec, keys: list[str]) -> dict[str, Any]:
    data = settings.to_dict()
    return {key: data.get(key) for key in keys}


def bisect_settings(
    bad_run_dir: str | Path,
    good_run_dir: str | Path,
    *,
    pipeline: Any = None,
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    on_progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> dict[str, Any]:
    """CONTRACT's settings `bisect` dict: {"culprit_settings": {setting: [good, bad]}, "reruns", "trail",
    "study_dir", "differences", "ignored", ...}. `runs_dir`: where the study goes (default: beside the bad run).
    """
    bad_record, bad = open_recorded(bad_run_dir)
    good_record, good = open_recorded(good_run_dir)
    symptom = Symptom.of_record(bad_record)  # the first failure, never an earlier warning
    if symptom is None:
        raise GhostError("nothing to bisect: the run is healthy")
    if symptom.shown_by(good_record.verdict, good_record.first_anomaly, good_record.stats(), good_record.status):
        raise GhostError(f"the good run {good_record.path.name} shows the bad run's symptom too ({symptom.describe()})")
    cache = PipelineCache(pipeline=pipeline, allow_pickle=allow_pickle)
    loaded = cache.get(bad)
    components = [c for c in pipeline_components(loaded.pipe) if c in loaded.dtypes]  # encode, denoise, decode
    units, ignored = differences(bad, good, components)
    if not units:
        raise GhostError("the two runs have the same settings: nothing to bisect (try `ghostviewer replay`)")
    if pipeline is not None and any(u.split(":")[0] in (_DTYPE, "device") for u in units):
        raise GhostError(
            "an in-memory pipeline has one dtype and device: bisect dtype or device against the recorded source"
        )
    changed = sorted({u.split(":")[0] for u in units})
    params = {"mode": "settings", "run_dir": str(bad_record.path), "good_run_dir": str(good_record.path),
              "differences": units}
    study = StudyWriter.create(Path(runs_dir) if runs_dir else bad_record.path.parent, "bisect", params)
    emit = on_progress or quiet
    with study:
        study.add_run(bad_record.path, {"bad": bad_record.run_id}, role="bad", summary=bad_record.summary())
        study.add_run(good_record.path, {"good": good_record.run_id}, role="good", summary=good_record.summary())
        emit({"event": "bisect_started", "mode": "settings", "run_dir": str(bad_record.path),
              "study_dir": str(study.path), "symptom": symptom.describe(), "differences": units})
        trials = Trials(cache, study, symptom, emit, cancel)

        def fails(kept: list[str]) -> bool:
            trial = compose(bad, good, kept, units, components)
            entry = trials.run(trial, {"kept_bad": kept}, note="bad values kept: " + ", ".join(kept),
                               describe={"kept_bad": list(kept), "settings": _as_run(trial, changed)})
            study.set_progress(len(trials.trail()))
            return entry["symptom"] is not False  # a crash is no evidence that the failure went away

        status = "done"
        try:
            minimal = ddmin(units, fails)
        except BisectionCancelled:
            minimal, status = units, "cancelled"
        culprit = compose(bad, good, minimal, units, components)
        touched = sorted({u.split(":")[0] for u in minimal})
        result: dict[str, Any] = {
            "culprit_settings": {key: [_shown(good, key), _shown(culprit, key)] for key in touched},
            "culprit_differences": minimal,
            "reruns": len(trials.trail()),
            "trail": trials.trail(),
            "study_dir": str(study.path),
            "run_dir": str(bad_record.path),
            "good_run_dir": str(good_record.path),
            "symptom": symptom.describe(),
            "first_warning": symptom.warning,
            "differences": units,
            "ignored": ignored,
            # component configs (a scheduler's keys) that differ: shown, not yet flipped one by one
            "component_differences": settings_diff(component_settings(good_record.environment),
                                                   component_settings(bad_record.environment)),
        }
        if status == "cancelled":
            result["status"] = "cancelled"
        summary = ", ".join(f"{k}: {a} → {b}" for k, (a, b) in result["culprit_settings"].items())
        study.finish(status, result=result | {"summary": summary})
    emit({"event": "bisect_finished", **result})
    return result

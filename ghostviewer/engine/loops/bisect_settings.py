"""Settings bisection: of the settings that differ between a good and a bad run, the fewest that make it bad.

Two runs that differ in several settings (dtype per component, scheduler and its config keys, guidance, size,
steps, prompt, seed, device, the call's strength, batch, ControlNet scale, generator device and LoRA scales, the
attention backend, bypasses, faults) — which difference is the bug? Each re-run takes the bad run's settings with a
subset of the differences swapped for the good run's values, and asks whether the bad run's symptom is still
there (analysis.symptom: the same oracle as bisection by bypass). Delta debugging (analysis.ddmin) finds a
1-minimal set of differences that keeps the symptom. What counts as one difference: bisect_units.

A per-component dtype (`float32,vae=float16`) is split into one difference per component whose dtype differs,
when more than one does: "float16 everywhere" against "float32" then comes out as "the VAE in float16". Each
dtype is loaded once through PipelineCache, so a bisection over dtypes loads each combination it tries once.
A scheduler config key (`scheduler.final_sigmas_type`) is flipped by installing, for the trial, the scheduler its
config describes (the recorded class and keys, the kept ones the bad run's). Another component's config key
(`vae.scaling_factor`, `unet.upcast_attention`, a transformers text encoder's `text_encoder.hidden_act`) is flipped
by rebuilding that component with the good run's value and the loaded weights (engine.loops.component_flip); one
that cannot be (a key that changes the architecture, a class that differs) is left at the bad run's value, with one
line why under `not_flipped`. Settings that only change what is recorded (captures, trace depth, attention maps) are
not bisected: they are taken from the bad run and listed under `ignored`, with the pipeline source (always the bad
run's); every other component's config difference is listed under `component_differences`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import diffusers
import torch

from ghostviewer.analysis.anomaly import recorded_latent_sigma
from ghostviewer.analysis.ddmin import ddmin
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops.bisect_study import bad_symptom, finish_bisection
from ghostviewer.engine.loops.bisect_trials import BisectionCancelled, ProgressFn, Trials, quiet
from ghostviewer.engine.loops.bisect_units import (
    DTYPE,
    Side,
    component_changes,
    compose,
    differences,
    is_component_unit,
    other_component_differences,
    shown,
)
from ghostviewer.engine.loops.component_flip import flippable, flipped
from ghostviewer.engine.loops.recorded import PipelineCache, open_recorded
from ghostviewer.engine.run.runner import CancelToken
from ghostviewer.engine.tracing.blocks import pipeline_components
from ghostviewer.record import StudyWriter
from ghostviewer.spec import RunSpec

__all__ = ["bisect_settings", "compose", "differences"]


def _as_run(settings: RunSpec, keys: list[str]) -> dict[str, Any]:
    return {key: getattr(settings, key) for key in keys if hasattr(settings, key)}


def build_scheduler(config: dict[str, Any]) -> Any:
    """The scheduler a recorded config describes (its `_class` and keys)."""
    name = str(config.get("_class"))
    cls = getattr(diffusers, name, None)
    if cls is None or not hasattr(cls, "from_config"):
        raise GhostError(f"the recorded scheduler class {name!r} is not one this diffusers has: cannot flip its keys")
    return cls.from_config({k: v for k, v in config.items() if not k.startswith("_")})


@contextmanager
def _installed(loaded: Any, config: dict[str, Any] | None,
               changes: dict[str, dict[str, Any]] | None = None) -> Iterator[None]:
    """The trial's scheduler and rebuilt components on the pipeline for the run, the pipeline's own put back."""
    with flipped(loaded.pipe, changes or {}):
        if config is None:
            yield
            return
        original = loaded.pipe.scheduler
        loaded.pipe.scheduler = build_scheduler(config)
        try:
            yield
        finally:
            loaded.pipe.scheduler = original


def _not_flipped(units: list[str], bad: Side, good: Side, pipe: Any,
                 differing: dict[str, list[Any]]) -> tuple[list[str], dict[str, str]]:
    """(the units kept, {component key: why it cannot be flipped}) over the other components' differences."""
    why: dict[str, str] = {}
    for unit in [u for u in units if is_component_unit(u)]:
        name, key = unit.split(".", 1)
        reason = flippable(pipe, name, key, good.components[name][key], good.components[name].get("_class"))
        if reason:
            why[unit] = reason
    for unit in differing:
        name, _, key = unit.partition(".")
        if unit not in units and unit not in why:
            why[unit] = (f"the runs' {name} classes differ: a class is the weights' own (load the good run's {name})"
                         if key == "class" else f"{name}.{key} is recorded for only one of the runs' {name}")
    return [u for u in units if u not in why], why


def _refuse_unrunnable(units: list[str], bad: RunSpec, good: RunSpec, pipeline: Any) -> None:
    if pipeline is not None and any(u.split(":")[0] in (DTYPE, "device") for u in units):
        raise GhostError(
            "an in-memory pipeline has one dtype and device: bisect dtype or device against the recorded source"
        )
    if "generator_device" in units and not torch.cuda.is_available():
        raise GhostError(f"the runs differ in generator_device ({good.generator_device} → {bad.generator_device}), "
                         "and torch sees no CUDA device here: bisect them on a machine with one")


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
    A scheduler config key is named "scheduler.KEY", a LoRA's scale "adapters:FILE".
    """
    bad_record, bad_spec = open_recorded(bad_run_dir)
    good_record, good_spec = open_recorded(good_run_dir)
    symptom = bad_symptom(bad_record)
    if symptom.shown_by(good_record.verdict, good_record.first_anomaly, good_record.stats(), good_record.status,
                        latent_sigma=recorded_latent_sigma(good_record.environment)):
        raise GhostError(f"the good run {good_record.path.name} shows the bad run's symptom too ({symptom.describe()})")
    bad, good = Side.of(bad_spec, bad_record.environment), Side.of(good_spec, good_record.environment)
    cache = PipelineCache(pipeline=pipeline, allow_pickle=allow_pickle)
    loaded = cache.get(bad_spec)
    components = [c for c in pipeline_components(loaded.pipe) if c in loaded.dtypes]  # encode, denoise, decode
    units, ignored = differences(bad, good, components)
    differing = other_component_differences(bad_record.environment, good_record.environment)
    units, not_flipped = _not_flipped(units, bad, good, loaded.pipe, differing)
    if not units:
        raise GhostError("the two runs have the same settings: nothing to bisect (try `ghostviewer replay`)")
    _refuse_unrunnable(units, bad_spec, good_spec, pipeline)
    changed = sorted({u.split(":")[0] for u in units if "." not in u})
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
            trial, scheduler = compose(bad, good, kept, units, components)
            changes = component_changes(good, kept, units)
            entry = trials.run(trial, {"kept_bad": kept}, note="bad values kept: " + ", ".join(kept),
                               around=lambda loaded: _installed(loaded, scheduler, changes),
                               describe={"kept_bad": list(kept), "settings": _as_run(trial, changed),
                                         **({"scheduler_config": scheduler} if scheduler else {}),
                                         **({"component_configs": changes} if changes else {})})
            study.set_progress(len(trials.trail()))
            return entry["symptom"] is not False  # a crash is no evidence that the failure went away

        status = "done"
        try:
            minimal = ddmin(units, fails)
        except BisectionCancelled:
            minimal, status = units, "cancelled"
        culprit, _scheduler = compose(bad, good, minimal, units, components)
        named = dict(shown(bad, good, culprit, unit) for unit in minimal)
        result: dict[str, Any] = {
            "culprit_settings": dict(sorted(named.items())),
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
            "component_differences": differing,  # other components' classes and keys, flipped or not
            "not_flipped": not_flipped,  # {key: why it could not be flipped}, those left at the bad run's value
        }
        summary = ", ".join(f"{k}: {a} → {b}" for k, (a, b) in result["culprit_settings"].items())
        finish_bisection(study, status, result, summary)
    emit({"event": "bisect_finished", **result})
    return result

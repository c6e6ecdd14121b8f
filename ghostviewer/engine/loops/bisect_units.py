"""What settings bisection flips: the differences between a good and a bad run, one unit each, and the settings a
trial runs with when it keeps some of the bad run's values.

A unit is
  - a setting of the run (a RunSpec field: every field but those that only change what is recorded, so a field
    added to the spec — a call's `strength`, `batch`, `controlnet_scale`, `generator_device`, `fuse_lora`, the
    `attention_backend` — is a candidate without being listed here);
  - 'dtype:COMPONENT' when a per-component dtype differs in more than one component;
  - 'adapters:FILE' when both runs load the same LoRA files and a file's scale differs ("FILE:SCALE" entries);
  - 'scheduler.KEY' for a key of the scheduler's config that both runs' schedulers have and that differs (as
    compare names them, analysis.compare.component_settings: a user's `final_sigmas_type` or `timestep_spacing`).
    Keys only one scheduler class has follow the class, which is the `scheduler` setting's unit;
  - 'COMPONENT.KEY' for another component's config key that differs, both runs' component being of one class (a VAE's
    `scaling_factor`, a U-Net's `upcast_attention`, a CLIP text encoder's `hidden_act`): flipped by rebuilding that
    component with the loaded weights (engine.loops.component_flip), where it can be — settings bisection says why
    where it cannot.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

from ghostviewer.analysis.compare import component_settings_pair, settings_diff
from ghostviewer.engine.run.baseline_lookup import format_dtypes
from ghostviewer.spec import RunSpec

RECORDING_ONLY = frozenset({"capture", "trace_depth", "capture_attention", "extra", "source"})
DTYPE = "dtype"
ADAPTER = "adapters:"
SCHEDULER = "scheduler."


@dataclass(frozen=True)
class Side:
    """One run of the pair: its settings and its scheduler's recorded config ({"_class": …, key: value})."""

    spec: RunSpec
    scheduler: dict[str, Any] = field(default_factory=dict)
    components: dict[str, dict[str, Any]] = field(default_factory=dict)  # the others' recorded configs

    @classmethod
    def of(cls, spec: RunSpec, environment: dict[str, Any]) -> Side:
        configs = environment.get("component_configs") or {}
        configs = configs if isinstance(configs, dict) else {}
        config = configs.get("scheduler")
        others = {n: dict(c) for n, c in configs.items() if n != "scheduler" and isinstance(c, dict)}
        return cls(spec, dict(config) if isinstance(config, dict) else {}, others)


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


def _scale(entry: str) -> tuple[str, str]:
    """'FILE:SCALE' → (FILE, SCALE); 'FILE' → (FILE, '') (spec/loras.py's rule: the last colon, a number after)."""
    head, colon, tail = entry.rpartition(":")
    try:
        float(tail)
    except ValueError:
        return entry, ""
    return (head, tail) if colon and head else (entry, "")


def _adapters(spec: RunSpec) -> dict[str, str]:
    return dict(_scale(entry) for entry in spec.adapters)


def _scale_of(spec: RunSpec, path: str) -> float | None:
    """A LoRA file's scale in a run (1.0 when its entry gives none), None when the run does not load it."""
    scale = _adapters(spec).get(path)
    return None if scale is None else float(scale or 1.0)


def _field_names() -> list[str]:
    return [f.name for f in fields(RunSpec) if f.name not in RECORDING_ONLY]


def differences(bad: Side, good: Side, components: list[str]) -> tuple[list[str], dict[str, Any]]:
    """(the bisected units, the ignored differences: settings that only change what is recorded)."""
    diff = settings_diff(good.spec.to_dict(), bad.spec.to_dict())
    ignored = {k: v for k, v in diff.items() if k in RECORDING_ONLY}
    units: list[str] = []
    for key in _field_names():
        if getattr(bad.spec, key) == getattr(good.spec, key):
            continue
        if key == DTYPE:
            ours, theirs = per_component(bad.spec.dtype, components), per_component(good.spec.dtype, components)
            split = [c for c in components if ours and theirs and ours[c] != theirs[c]]
            if len(split) > 1:
                units.extend(f"{DTYPE}:{c}" for c in split)
                continue
        if key == "adapters":
            ours, theirs = _adapters(bad.spec), _adapters(good.spec)
            if set(ours) == set(theirs) and len(ours) == len(bad.spec.adapters) == len(good.spec.adapters):
                units.extend(f"{ADAPTER}{path}" for path in ours if ours[path] != theirs[path])
                continue
        units.append(key)
    units.extend(f"{SCHEDULER}{key}" for key in scheduler_keys(bad, good))
    units.extend(component_keys(bad, good))
    return units, ignored


def component_keys(bad: Side, good: Side) -> list[str]:
    """'COMPONENT.KEY' for each other component's config key that differs, the component of one class in both."""
    found = []
    for name, ours in bad.components.items():
        theirs = good.components.get(name)
        if theirs is None or theirs.get("_class") != ours.get("_class"):
            continue
        found += [f"{name}.{k}" for k in ours if not k.startswith("_") and k in theirs and ours[k] != theirs[k]]
    return found


def is_component_unit(unit: str) -> bool:
    return "." in unit and ":" not in unit and not unit.startswith(SCHEDULER)  # no RunSpec field has a dot


def component_changes(good: Side, kept: list[str], units: list[str]) -> dict[str, dict[str, Any]]:
    """{component: {key: the good run's value}} for every component unit not kept bad."""
    changes: dict[str, dict[str, Any]] = {}
    for unit in units:
        if is_component_unit(unit) and unit not in kept:
            name, key = unit.split(".", 1)
            changes.setdefault(name, {})[key] = good.components[name][key]
    return changes


def scheduler_keys(bad: Side, good: Side) -> list[str]:
    """The scheduler's config keys both runs' schedulers have, with different values."""
    return [k for k in bad.scheduler if not k.startswith("_") and k in good.scheduler
            and bad.scheduler[k] != good.scheduler[k]]


def other_component_differences(bad_env: dict[str, Any], good_env: dict[str, Any]) -> dict[str, list[Any]]:
    """The other components' classes and config keys that differ ("vae.scaling_factor": [good, bad]), flipped
    or not."""
    diff = settings_diff(*component_settings_pair(good_env, bad_env))
    return {k: v for k, v in diff.items() if not k.startswith(SCHEDULER)}


def compose(bad: Side, good: Side, kept: list[str], units: list[str],
            components: list[str]) -> tuple[RunSpec, dict[str, Any] | None]:
    """The bad run's settings with every unit not in `kept` taken from the good run, and the scheduler config to
    install for the trial (None: no scheduler key is bisected; the `scheduler` setting alone decides)."""
    data = bad.spec.to_dict()
    for unit in units:
        if unit not in kept and ":" not in unit and "." not in unit:
            data[unit] = getattr(good.spec, unit)
            if isinstance(data[unit], tuple):
                data[unit] = list(data[unit])
    data[DTYPE] = _dtype(bad, good, kept, units, components, data[DTYPE])
    adapters = [u[len(ADAPTER):] for u in units if u.startswith(ADAPTER)]
    if adapters:
        theirs = {_scale(e)[0]: e for e in good.spec.adapters}
        data["adapters"] = [e if _scale(e)[0] not in adapters or f"{ADAPTER}{_scale(e)[0]}" in kept
                            else theirs[_scale(e)[0]] for e in bad.spec.adapters]
    return RunSpec.from_dict(data), _scheduler_config(bad, good, kept, units)


def _dtype(bad: Side, good: Side, kept: list[str], units: list[str], components: list[str], current: Any) -> Any:
    split_parts = [u.split(":", 1)[1] for u in units if u.startswith(f"{DTYPE}:")]
    if not split_parts:
        return current
    kept_parts = {u.split(":", 1)[1] for u in kept if u.startswith(f"{DTYPE}:")}
    if kept_parts == set(split_parts):
        return bad.spec.dtype
    if not kept_parts:
        return good.spec.dtype
    ours, base = per_component(bad.spec.dtype, components), per_component(good.spec.dtype, components)
    assert ours is not None and base is not None  # split only when both were readable
    mixed = {c: ours[c] if c in kept_parts else base[c] for c in components}
    return format_dtypes(mixed, prefer=Counter(base.values()).most_common(1)[0][0])


def _scheduler_config(bad: Side, good: Side, kept: list[str], units: list[str]) -> dict[str, Any] | None:
    keys = [u[len(SCHEDULER):] for u in units if u.startswith(SCHEDULER)]
    if not keys:
        return None
    # the class (and the keys only it has) follow the `scheduler` setting's unit
    base = good if "scheduler" in units and "scheduler" not in kept else bad
    config = dict(base.scheduler)
    for key in keys:
        config[key] = (bad if f"{SCHEDULER}{key}" in kept else good).scheduler[key]
    return config


def shown(bad: Side, good: Side, culprit: RunSpec, unit: str) -> tuple[str, list[Any]]:
    """(the name the answer gives a unit, [good value, bad value])."""
    if unit.startswith(SCHEDULER):
        key = unit[len(SCHEDULER):]
        return unit, [good.scheduler.get(key), bad.scheduler.get(key)]
    if is_component_unit(unit):
        name, key = unit.split(".", 1)
        return unit, [good.components.get(name, {}).get(key), bad.components.get(name, {}).get(key)]
    if unit.startswith(ADAPTER):
        path = unit[len(ADAPTER):]
        return unit, [_scale_of(good.spec, path), _scale_of(bad.spec, path)]
    key = unit.split(":", 1)[0]

    def value(spec: RunSpec) -> Any:
        found = getattr(spec, key)
        found = list(found) if isinstance(found, tuple) else found
        return (found or "float32") if key == DTYPE else found  # no dtype given means float32

    return key, [value(good.spec), value(culprit)]

"""Which baseline a new run is judged against.

A baseline is keyed by the pipeline's identity (its weight hashes, recorded in every run's environment) and the
settings that change its activations (analysis.baseline.SETTINGS_KEYS); it is looked for in
`<runs_dir>/baselines/<key>.json`, then among the baselines the project ships (analysis/baseline_store.py, which
reads each file once). A pipeline object in memory has the weight hashes of the folder it was loaded from while it
still holds that folder's weights (memory_identity.py); otherwise none, and no baseline.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ghostviewer.analysis.baseline import Baseline, baseline_key, settings_of
from ghostviewer.analysis.baseline_store import find_baseline_file, runs_dir_folders
from ghostviewer.analysis.envelope import BaselineError
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.spec import RunSpec


def format_dtypes(dtypes: Mapping[str, str], prefer: str = "float32") -> str:
    """{component: dtype} → the shortest spec: 'float16', or 'float32,vae=float16' (the commonest dtype as the
    default, `prefer` on a tie; the others by component name). The one dtype formatter: what runs, studies and
    baselines record."""
    counts = Counter(dtypes.values())
    default = max(counts, key=lambda d: (counts[d], d == prefer))
    rest = [f"{c}={d}" for c, d in sorted(dtypes.items()) if d != default]
    return ",".join([default, *rest])


def identity_of(loaded: LoadedPipeline) -> dict[str, Any] | None:
    """What names the pipeline's weights: its class and per-component weight hashes (None without hashes)."""
    if not loaded.weight_hashes:
        return None
    return {"class": type(loaded.pipe).__name__, "weight_hashes": dict(sorted(loaded.weight_hashes.items()))}


def key_settings(loaded: LoadedPipeline, settings: dict[str, Any]) -> dict[str, Any]:
    """The baseline settings of a run's resolved settings (scheduler, steps, size, dtype as loaded, guidance)."""
    out = settings_of(settings)
    out["dtype"] = format_dtypes(loaded.dtypes) if loaded.dtypes else None
    out["guidance"] = float(out["guidance"]) if out["guidance"] is not None else None
    return out


def lookup_baseline(
    loaded: LoadedPipeline, settings: RunSpec | dict[str, Any], runs_dir: str | Path | None
) -> tuple[Baseline | None, str]:
    """(the matching baseline or None, a one-line note for the run's event log saying which or why none)."""
    identity = identity_of(loaded)
    if identity is None:
        why = loaded.identity_note or "the pipeline has no weight hashes (a pipeline object in memory)"
        return None, f"no baseline: {why}; drift and colour-range checks are off"
    values = settings.to_dict() if isinstance(settings, RunSpec) else dict(settings)
    key = baseline_key(identity, key_settings(loaded, values))
    try:
        found = find_baseline_file(key, runs_dir_folders(runs_dir))
    except BaselineError as exc:
        return None, f"no baseline: {exc}"
    if found is None:
        return None, (f"no baseline for these settings (key {key}): drift and colour-range checks are off; "
                      "build one with 'ghostviewer baseline build'")
    baseline, path = found
    return baseline, f"using baseline {path} ({baseline.meta.get('runs', '?')} healthy runs)"


def find_baseline(loaded: LoadedPipeline, settings: RunSpec | dict[str, Any],
                  runs_dir: str | Path | None) -> Baseline | None:
    """The baseline matching this pipeline and these (resolved) settings, or None."""
    return lookup_baseline(loaded, settings, runs_dir)[0]

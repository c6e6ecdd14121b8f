"""Which baseline a new run is judged against.

A baseline is keyed by the pipeline's identity (its weight hashes, recorded in every run's environment) and the
settings that change its activations (analysis.baseline.SETTINGS_KEYS; for another kind of call than text-to-image,
or with LoRAs or a batch, also CALL_KEYS; the pipeline for the kind, its ControlNet and LoRAs are in the identity:
pipeline class, weight hashes); it is looked for in
`<runs_dir>/baselines/<key>.json`, then among the baselines the project ships (analysis/baseline_store.py, which
reads each file once). Without one, the nearest baseline of the same architecture (architecture_of: each
component's class, tensor names and shapes, and config) in those folders judges the run, and the note says how it
differs (analysis/baseline_match.py). A pipeline object in memory has the weight hashes of the folder it was loaded
from while it still holds that folder's weights (memory_identity.py); otherwise it is judged as other weights of
its architecture.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from ghostviewer.analysis.baseline import Baseline, baseline_key, settings_of
from ghostviewer.analysis.baseline_file import load_baseline
from ghostviewer.analysis.baseline_match import BaselineChoice, judging_view, nearest, plan_match
from ghostviewer.analysis.baseline_store import all_baselines, find_baseline_file, runs_dir_folders
from ghostviewer.analysis.envelope import BaselineError
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.run.applied_settings import component_configs
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


def _structure(module: nn.Module) -> str:
    text = ";".join(f"{name}:{tuple(t.shape)}" for name, t in module.state_dict().items())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_VOCABS: dict[tuple[int, int], str] = {}


def vocabulary_hash(tokenizer: Any) -> str | None:
    """16 hex characters naming a tokenizer's vocabulary (token → id); None when it has none to read."""
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # noqa: BLE001 - a tokenizer without a readable vocabulary simply has no hash
        return None
    key = (id(tokenizer), len(vocab))
    if key not in _VOCABS:
        if len(_VOCABS) > 16:
            _VOCABS.clear()
        _VOCABS[key] = vocab_digest(vocab)
    return _VOCABS[key]


def vocab_digest(vocab: Mapping[str, int]) -> str:
    text = json.dumps(sorted(vocab.items(), key=lambda kv: (kv[1], kv[0])), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def architecture_of(pipe: Any) -> dict[str, Any]:
    """What a baseline of this pipeline applies to beyond its exact weights: the pipeline class and, per component
    (the scheduler is a setting, not architecture), its class, the hash of its tensors' names and shapes
    (`structure`), its config, and a tokenizer's vocabulary hash."""
    configs = component_configs(pipe)
    components: dict[str, Any] = {}
    for name, component in (getattr(pipe, "components", None) or {}).items():
        if component is None or name == "scheduler":
            continue
        if isinstance(component, nn.Module):
            config = {k: v for k, v in (configs.get(name) or {}).items() if k != "_class"}
            components[name] = {"class": type(component).__name__, "structure": _structure(component),
                                "config": config}
        elif hasattr(component, "get_vocab"):
            components[name] = {"class": type(component).__name__, "structure": vocabulary_hash(component)}
    return {"class": type(pipe).__name__, "components": components}


def _choose(loaded: LoadedPipeline, values: dict[str, Any], runs_dir: str | Path | None
            ) -> tuple[BaselineChoice | None, str]:
    identity = identity_of(loaded)
    wanted = key_settings(loaded, values)
    folders = runs_dir_folders(runs_dir)
    if identity is not None:
        key = baseline_key(identity, wanted)
        try:
            found = find_baseline_file(key, folders)
        except BaselineError as exc:
            return None, f"no baseline: {exc}"
        if found is not None:
            plan = plan_match(found[0], identity, architecture_of(loaded.pipe), wanted)
            if not isinstance(plan, str):
                choice = BaselineChoice(found[0], found[0], plan)
                return choice, choice.describe()
    architecture = architecture_of(loaded.pipe)
    candidates, _unreadable = all_baselines(folders)
    unknown = loaded.identity_note or "a pipeline object in memory"
    choice, refused = nearest(candidates, identity, architecture, wanted, unknown)
    if choice is not None:
        return choice, choice.describe()
    why = "" if identity is not None else \
        f" ({loaded.identity_note or 'the pipeline has no weight hashes: a pipeline object in memory'})"
    others = f"; not usable: {'; '.join(refused[:3])}" if refused else ""
    kind = wanted.get("kind")
    what = f"no {kind} baseline" if kind else "no baseline"
    return None, (f"{what} for these settings{why}, nor one of the same architecture: drift and colour-range "
                  f"checks are off; build one with 'ghostviewer baseline build'{others}")


def choose_baseline(loaded: LoadedPipeline, settings: RunSpec | dict[str, Any], runs_dir: str | Path | None,
                    given: str | Path | None = None) -> tuple[BaselineChoice | None, str]:
    """(how the run is judged — the baseline, its judging view, what differs — or None, a one-line note for the
    run's event log saying which or why none). `given`: a baseline file the user chose (GhostError when it cannot
    be read or is of another architecture)."""
    values = settings.to_dict() if isinstance(settings, RunSpec) else dict(settings)
    if given is None:
        return _choose(loaded, values, runs_dir)
    try:
        baseline = load_baseline(given)
    except BaselineError as exc:
        raise GhostError(str(exc)) from None
    plan = plan_match(baseline, identity_of(loaded), architecture_of(loaded.pipe), key_settings(loaded, values),
                      loaded.identity_note or "a pipeline object in memory")
    if isinstance(plan, str):
        raise GhostError(f"the baseline {given} cannot judge this pipeline: {plan}")
    choice = BaselineChoice(judging_view(baseline, plan), baseline, plan, given=True)
    return choice, choice.describe()


def lookup_baseline(
    loaded: LoadedPipeline, settings: RunSpec | dict[str, Any], runs_dir: str | Path | None
) -> tuple[Baseline | None, str]:
    """(the baseline that judges the run — exact, or a view of the nearest of the same architecture — or None, a
    one-line note for the run's event log saying which or why none)."""
    choice, note = choose_baseline(loaded, settings, runs_dir)
    return (None if choice is None else choice.baseline), note


def find_baseline(loaded: LoadedPipeline, settings: RunSpec | dict[str, Any],
                  runs_dir: str | Path | None) -> Baseline | None:
    """The baseline judging this pipeline at these (resolved) settings, or None."""
    return lookup_baseline(loaded, settings, runs_dir)[0]

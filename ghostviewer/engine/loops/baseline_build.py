"""Baselines on the engine side: building one from healthy runs (a `baseline` study) and finding the one a run uses.

A baseline is keyed by the pipeline's identity (its weight hashes, recorded in every run's environment) and the
settings that change its activations (analysis.baseline.SETTINGS_KEYS); it is looked for in
`<runs_dir>/baselines/<key>.json`, then among the baselines the project ships (`resources/baselines/`, the demo
pipeline's at its default settings). A pipeline object in memory has the weight hashes of the folder it was loaded
from while it still holds that folder's weights (memory_identity.py); otherwise none, and no baseline.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ghostviewer.analysis.baseline import Baseline, BaselineError, baseline_key, settings_of
from ghostviewer.analysis.baseline_build import BaselineBuilder
from ghostviewer.analysis.baseline_file import load_baseline, save_baseline
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.paths import resources_dir
from ghostviewer.record import RecordError, RunRecord, StudyWriter
from ghostviewer.spec import RunSpec

SHIPPED_BASELINES = resources_dir() / "baselines"  # the demo's, built by scripts/build_demo_baseline.py
BASELINES_FOLDER = "baselines"
CHANNEL_MEANS = "channel_means"  # the run record's tensors file the runner writes them to
ProgressFn = Callable[[dict[str, Any]], None]


def dtype_label(dtypes: dict[str, str]) -> str | None:
    """'float32' when every component has that dtype, else 'text_encoder=float32,unet=float16,…'."""
    kinds = set(dtypes.values())
    if len(kinds) == 1:
        return kinds.pop()
    return ",".join(f"{name}={dtypes[name]}" for name in sorted(dtypes)) or None


def identity_of(loaded: LoadedPipeline) -> dict[str, Any] | None:
    """What names the pipeline's weights: its class and per-component weight hashes (None without hashes)."""
    if not loaded.weight_hashes:
        return None
    return {"class": type(loaded.pipe).__name__, "weight_hashes": dict(sorted(loaded.weight_hashes.items()))}


def key_settings(loaded: LoadedPipeline, settings: dict[str, Any]) -> dict[str, Any]:
    """The baseline settings of a run's resolved settings (scheduler, steps, size, dtype as loaded, guidance)."""
    out = settings_of(settings)
    out["dtype"] = dtype_label(loaded.dtypes)
    out["guidance"] = float(out["guidance"]) if out["guidance"] is not None else None
    return out


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, _mtime_ns: int, _size: int) -> Baseline:
    return load_baseline(path)


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
    folders = [Path(runs_dir) / BASELINES_FOLDER] if runs_dir is not None else []
    for folder in [*folders, SHIPPED_BASELINES]:
        path = folder / f"{key}.json"
        try:
            stat = path.stat()
        except OSError:
            continue
        try:
            found = _load_cached(str(path), stat.st_mtime_ns, stat.st_size)
            return found, f"using baseline {path} ({found.meta.get('runs', '?')} healthy runs)"
        except BaselineError as exc:
            return None, f"no baseline: {exc}"
    return None, (f"no baseline for these settings (key {key}): drift and colour-range checks are off; "
                  "build one with 'ghostviewer baseline build'")


def find_baseline(loaded: LoadedPipeline, settings: RunSpec | dict[str, Any],
                  runs_dir: str | Path | None) -> Baseline | None:
    """The baseline matching this pipeline and these (resolved) settings, or None."""
    return lookup_baseline(loaded, settings, runs_dir)[0]


def baseline_jobs(prompts: Sequence[str], seeds: Sequence[int], pairing: str = "product") -> list[tuple[str, int]]:
    """(prompt, seed) pairs, each once: every prompt with every seed, or ('zip') the i-th prompt with the i-th
    seed."""
    if pairing == "zip":
        if len(seeds) < len(prompts):
            raise GhostError(f"pairing 'zip' needs a seed per prompt: {len(prompts)} prompts, {len(seeds)} seeds")
        return list(dict.fromkeys(zip(prompts, seeds)))
    if pairing != "product":
        raise GhostError(f"pairing must be 'product' or 'zip', not {pairing!r}")
    return list(dict.fromkeys((prompt, seed) for prompt in prompts for seed in seeds))


def _final_image(record: RunRecord) -> np.ndarray | None:
    path = record.image_path("final")
    return None if path is None else np.asarray(Image.open(path).convert("RGB"))


def _channel_means(record: RunRecord) -> dict[str, np.ndarray]:
    try:
        return record.tensors(CHANNEL_MEANS)
    except (RecordError, KeyError, OSError):
        return {}


def build_baseline(
    loaded: LoadedPipeline,
    prompts: Iterable[str],
    seeds: Sequence[int],
    runs_dir: str | Path,
    *,
    steps: int = 20,
    guidance: float | None = None,
    width: int | None = None,
    height: int | None = None,
    scheduler: str | None = None,
    pairing: str = "product",
    dtype: str | None = None,
    cancel: Any = None,
    on_progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Run healthy runs (a `baseline` study), build the envelope from those judged healthy, and write it to
    `<runs_dir>/baselines/<key>.json`. Returns {"baseline", "key", "runs", "healthy", "excluded", …}.
    `dtype`: the spec the pipeline was loaded with (recorded in each run, so a replay reloads it the same way)."""
    from ghostviewer.engine.run.runner import execute_run  # the runner imports this module

    identity = identity_of(loaded)
    if identity is None:
        raise GhostError("a baseline needs a pipeline loaded from disk (its weight hashes name it); "
                         "an in-memory pipeline object has none")
    jobs = baseline_jobs(list(prompts), list(seeds), pairing)
    if not jobs:
        raise GhostError("a baseline needs at least one prompt and one seed")
    emit = on_progress or (lambda _event: None)
    runs_dir = Path(runs_dir)
    params = {"source": loaded.source, "steps": steps, "guidance": guidance, "width": width, "height": height,
              "scheduler": scheduler, "pairing": pairing, "prompts": len({p for p, _ in jobs}), "seeds": list(seeds)}
    started = time.perf_counter()
    builder: BaselineBuilder | None = None
    excluded: list[dict[str, Any]] = []
    with StudyWriter.create(runs_dir, "baseline", params, total=len(jobs)) as study:
        for done, (prompt, seed) in enumerate(jobs, start=1):
            settings = RunSpec(prompt=prompt, seed=seed, steps=steps, guidance=guidance, width=width,
                                   height=height, scheduler=scheduler, device=loaded.device, source=loaded.source,
                                   dtype=dtype)
            result = execute_run(loaded, settings, study.runs_dir, cancel=cancel, baseline=None)
            study.add_run(result["run_dir"], {"prompt": prompt, "seed": seed}, summary=result)
            study.set_progress(done)
            label = (result.get("verdict") or {}).get("label")
            if result.get("status") == "cancelled":
                study.finish("cancelled", error="cancelled by the user")
                raise GhostError("baseline build cancelled")
            if label != "ok" or result["first_anomaly"] is not None:
                excluded.append({"prompt": prompt, "seed": seed, "verdict": label, "first_anomaly":
                                 result["first_anomaly"]})
                study.event("excluded", f"not healthy ({label}): left out of the baseline", prompt=prompt, seed=seed)
            else:
                try:
                    record = RunRecord(result["run_dir"])
                except RecordError as exc:
                    raise GhostError(str(exc)) from None
                if builder is None:
                    builder = BaselineBuilder(identity, key_settings(loaded, dict(record.settings)))
                clip = (result["verdict"].get("scores") or {}).get("clip_score")
                builder.add_run(record.stats(), _final_image(record), _channel_means(record),
                                None if clip is None else {"clip_score": float(clip)})
            emit({"event": "baseline_run", "done": done, "total": len(jobs), "verdict": label,
                  "run_dir": result["run_dir"]})
        if builder is None:
            raise GhostError(f"none of the {len(jobs)} runs was healthy: no baseline can be built")
        try:
            baseline = builder.build(meta={"built_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "source": loaded.source,
                                           "prompts": params["prompts"], "seeds": len(set(seeds)),
                                           "study": study.path.name})
        except BaselineError as exc:
            raise GhostError(str(exc)) from None
        path = save_baseline(baseline, runs_dir / BASELINES_FOLDER / f"{baseline.key}.json")
        elapsed = time.perf_counter() - started
        summary = f"baseline from {builder.runs} healthy runs of {len(jobs)}"
        study.set_result({"summary": summary, "baseline": str(path), "key": baseline.key})
    return {
        "baseline": str(path),
        "key": baseline.key,
        "settings": baseline.settings,
        "runs": len(jobs),
        "healthy": builder.runs,
        "excluded": excluded,
        "modules": len(baseline.modules),
        "study_dir": str(study.path),
        "elapsed_s": round(elapsed, 3),
    }


DEMO_DEFAULT_PROMPTS = 24  # × the default seeds 0-9: 240 runs, the size of the shipped demo baseline


def baseline_inputs(loaded: LoadedPipeline, prompts: Any, seeds: Any) -> tuple[list[str], list[int]]:
    """The prompts (a prompt list file, a list of prompts or dicts, or None: the demo's own) and the seeds (a
    spec such as '0-9' or a list) of a baseline build; GhostError with a one-line message when unusable."""
    from ghostviewer.demo.baseline_prompts import baseline_prompts
    from ghostviewer.spec.prompt_lists import PromptListError, read_prompt_list
    from ghostviewer.spec.seeds import SeedSpecError, parse_seeds

    if prompts is None:
        if loaded.source_kind != "demo":
            raise GhostError("a baseline of a pipeline other than the demo needs prompts (--prompts LIST)")
        texts = list(dict.fromkeys(baseline_prompts(4 * DEMO_DEFAULT_PROMPTS)))[:DEMO_DEFAULT_PROMPTS]
    elif isinstance(prompts, (str, Path)):
        try:
            texts = [item["prompt"] for item in read_prompt_list(prompts)]
        except (PromptListError, OSError) as exc:
            raise GhostError(str(exc)) from None
    else:
        texts = [item["prompt"] if isinstance(item, dict) else str(item) for item in prompts]
    try:
        seed_list = parse_seeds(seeds) if isinstance(seeds, (str, int)) else [int(s) for s in seeds]
    except SeedSpecError as exc:
        raise GhostError(str(exc)) from None
    if not texts or not seed_list:
        raise GhostError("a baseline needs at least one prompt and one seed")
    return texts, seed_list

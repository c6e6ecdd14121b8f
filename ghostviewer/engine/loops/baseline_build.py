"""Building a baseline from healthy runs: a `baseline` study of healthy runs, the envelope built from those
judged healthy, written to `<runs_dir>/baselines/<key>.json` (where engine/run/baseline_lookup.py finds it).

The runs may be of any kind of call GhostViewer makes — text-to-image, img2img, inpaint, ControlNet, with LoRAs,
batches — given for the whole build (`call`) or by the list's entries (init_image, strength, mask, control_image,
lora, read as a sweep reads them); one baseline is one kind of call at one set of settings (its key says which:
analysis/baseline.py CALL_KEYS), and every run is checked before any runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ghostviewer.analysis.baseline import CALL_KEYS, PROMPT_TOKENS, settings_of
from ghostviewer.analysis.baseline_build import BaselineBuilder
from ghostviewer.analysis.baseline_file import save_baseline
from ghostviewer.analysis.baseline_store import BASELINES_FOLDER, recorded_channel_means
from ghostviewer.analysis.envelope import BaselineError
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.loras import loras_loaded, read_loras
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.loops.sweep_jobs import OVERRIDES, Items, SweepJob, count_jobs, iter_items, plan_jobs
from ghostviewer.engine.run.baseline_lookup import architecture_of, identity_of, key_settings
from ghostviewer.engine.run.call_inputs import pipeline_for, read_inputs
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.engine.tracing.prompt_tokens import token_ids
from ghostviewer.record import RecordError, RunRecord, StudyWriter
from ghostviewer.spec import RunSpec, with_call_defaults
from ghostviewer.spec.run_spec import CALL_FIELDS

ProgressFn = Callable[[dict[str, Any]], None]


def baseline_jobs(prompts: Items, seeds: Sequence[int], pairing: str = "product") -> list[SweepJob]:
    """The runs of a build, each once: every entry with every seed (an entry naming its own seed: that seed only,
    as in a sweep), or ('zip') the i-th entry with the i-th seed. Entries are read as a sweep reads them
    (engine/loops/sweep_jobs.py: a list file's image paths from its folder, its values overriding the build's)."""
    if pairing == "zip":
        entries = list(iter_items(prompts))
        if len(seeds) < len(entries):
            raise GhostError(f"pairing 'zip' needs a seed per prompt: {len(entries)} prompts, {len(seeds)} seeds")
        jobs = [_job(entry, seed) for entry, seed in zip(entries, seeds)]
    elif pairing == "product":
        jobs = list(plan_jobs(prompts, list(seeds)))
    else:
        raise GhostError(f"pairing must be 'product' or 'zip', not {pairing!r}")
    unique: dict[str, SweepJob] = {}
    for job in jobs:
        unique.setdefault(json.dumps(job.key(), sort_keys=True, default=str), job)
    return list(unique.values())


def _job(entry: dict[str, Any], seed: int) -> SweepJob:
    """A list entry's run with this seed, its values overriding the build's (as a sweep's)."""
    return SweepJob(str(entry["prompt"]), seed, {OVERRIDES[k]: v for k, v in entry.items() if k in OVERRIDES})


def _final_image(record: RunRecord) -> np.ndarray | None:
    path = record.image_path("final")
    return None if path is None else np.asarray(Image.open(path).convert("RGB"))


def _recorded_identity(record: RunRecord) -> dict[str, Any]:
    """The identity the run was judged by (engine/run/baseline_lookup.identity_of of the pipeline for its kind, its
    ControlNet's and LoRAs' hashes included), as its environment records it."""
    pipeline = record.environment.get("pipeline") or {}
    hashes = pipeline.get("weight_hashes") or {}
    return {"class": pipeline.get("class"), "weight_hashes": dict(sorted(hashes.items()))}


def _check_jobs(loaded: LoadedPipeline, prompts: Items, seeds: list[int], base: RunSpec) -> dict[str, Any]:
    """Every run of the build checked before any runs (one line each): each entry as a sweep checks it (its files,
    a mask without an init image, a strength that gives no step), its images readable, one kind of call at one set
    of settings for all, the pipeline's form for the kind and the LoRAs. Returns the architecture the runs are made
    on (the kind's pipeline class, LoRAs loaded as the run loads them)."""
    count_jobs(prompts, seeds, base)
    where = Path(prompts).name if isinstance(prompts, (str, Path)) else "prompts"
    runs = [with_call_defaults(_job(entry, base.seed).settings(base)) for entry in iter_items(prompts)]
    first = settings_of(runs[0].to_dict())
    read: set[tuple[str | None, ...]] = set()
    for index, spec in enumerate(runs, start=1):  # a run's settings are its entry's, whatever its seed
        settings = settings_of(spec.to_dict())
        differing = next((k for k in sorted(settings.keys() | first.keys()) if settings.get(k) != first.get(k)),
                         None)
        if differing is not None:
            ours, theirs = (s.get(differing, CALL_KEYS.get(differing)) for s in (settings, first))
            raise GhostError(f"{where} entry {index}: {differing} {ours} where the first run has {theirs}: a "
                             "baseline is one kind of call at one set of settings (give the setting to the whole "
                             "build, or build one baseline each)")
        inputs = (spec.init_image, spec.mask, spec.control_image)
        if inputs not in read:
            read.add(inputs)
            try:
                read_inputs(spec)
            except GhostError as exc:
                raise GhostError(f"{where} entry {index}: {exc}") from None
    made = pipeline_for(loaded, runs[0])
    with loras_loaded(made.pipe, read_loras(made.pipe, runs[0].adapters), runs[0].fuse_lora):
        return architecture_of(made.pipe)


def build_baseline(
    loaded: LoadedPipeline,
    prompts: Items,
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
    call: Mapping[str, Any] | None = None,
    cancel: Any = None,
    on_progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Run healthy runs (a `baseline` study), build the envelope from those judged healthy, and write it to
    `<runs_dir>/baselines/<key>.json`. Returns {"baseline", "key", "runs", "healthy", "excluded", …}.
    `prompts`: a prompt list file or prompts (strings, or dicts with a list row's keys: an entry may name its
    init_image, strength, mask, control_image, lora). `call`: RunSpec fields of the call for the whole build
    (init_image, strength, mask, control_image, controlnet, controlnet_scale, adapters, fuse_lora, batch).
    `dtype`: the spec the pipeline was loaded with (recorded in each run, so a replay reloads it the same way)."""
    if identity_of(loaded) is None:
        raise GhostError("a baseline needs a pipeline loaded from disk (its weight hashes name it); "
                         "an in-memory pipeline object has none")
    base = RunSpec.from_dict({"prompt": "", "steps": steps, "guidance": guidance, "width": width, "height": height,
                              "scheduler": scheduler, "device": loaded.device, "source": loaded.source,
                              "dtype": dtype, **dict(call or {})})
    seeds = list(seeds)
    jobs = baseline_jobs(prompts, seeds, pairing) if seeds else []
    if not jobs:
        raise GhostError("a baseline needs at least one prompt and one seed")
    architecture = _check_jobs(loaded, prompts, seeds, base)
    emit = on_progress or (lambda _event: None)
    runs_dir = Path(runs_dir)
    kind = {k: v for k, v in base.to_dict().items() if k in CALL_FIELDS or k == "adapters"}
    params = {"source": loaded.source, "steps": steps, "guidance": guidance, "width": width, "height": height,
              "scheduler": scheduler, "pairing": pairing, "prompts": len({job.prompt for job in jobs}),
              "seeds": seeds, **({"call": kind} if kind else {})}
    started = time.perf_counter()
    builder: BaselineBuilder | None = None
    excluded: list[dict[str, Any]] = []
    with StudyWriter.create(runs_dir, "baseline", params, total=len(jobs)) as study:
        for done, job in enumerate(jobs, start=1):
            prompt, seed = job.prompt, job.seed
            result = execute_run(loaded, job.settings(base), study.runs_dir, cancel=cancel, baseline=None)
            study.add_run(result["run_dir"], job.key(), summary=result)
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
                    builder = BaselineBuilder(_recorded_identity(record), key_settings(loaded, dict(record.settings)))
                clip = (result["verdict"].get("scores") or {}).get("clip_score")
                builder.add_run(record.stats(), _final_image(record), recorded_channel_means(record),
                                None if clip is None else {"clip_score": float(clip)})
            emit({"event": "baseline_run", "done": done, "total": len(jobs), "verdict": label,
                  "run_dir": result["run_dir"]})
        if builder is None:
            raise GhostError(f"none of the {len(jobs)} runs was healthy: no baseline can be built")
        try:
            meta = {"built_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "source": loaded.source,
                    "prompts": params["prompts"], "seeds": len(set(seeds)), "study": study.path.name}
            tokens = token_ids(loaded.pipe, sorted({job.prompt for job in jobs if isinstance(job.prompt, str)}))
            if tokens is not None:
                meta[PROMPT_TOKENS] = tokens  # which prompts its text encoder envelope speaks for
            baseline = builder.build(meta=meta, architecture=architecture)
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


def baseline_inputs(loaded: LoadedPipeline, prompts: Any, seeds: Any) -> tuple[Items, list[int]]:
    """The prompts (a prompt list file, kept as its path; a list of prompts or dicts; or None: the demo's own) and
    the seeds (a spec such as '0-9' or a list) of a baseline build; GhostError with a one-line message when
    unusable."""
    from ghostviewer.demo.baseline_prompts import baseline_prompts
    from ghostviewer.spec.seeds import SeedSpecError, parse_seeds

    items: Items
    if prompts is None:
        if loaded.source_kind != "demo":
            raise GhostError("a baseline of a pipeline other than the demo needs prompts (--prompts LIST)")
        items = list(dict.fromkeys(baseline_prompts(4 * DEMO_DEFAULT_PROMPTS)))[:DEMO_DEFAULT_PROMPTS]
    elif isinstance(prompts, (str, Path)):
        items = prompts
    else:
        items = [item if isinstance(item, dict) else str(item) for item in prompts]
    try:
        seed_list = parse_seeds(seeds) if isinstance(seeds, (str, int)) else [int(s) for s in seeds]
    except SeedSpecError as exc:
        raise GhostError(str(exc)) from None
    if not items or not seed_list:
        raise GhostError("a baseline needs at least one prompt and one seed")
    return items, seed_list

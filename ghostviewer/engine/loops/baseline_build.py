"""Building a baseline from healthy runs: a `baseline` study of healthy runs, the envelope built from those
judged healthy, written to `<runs_dir>/baselines/<key>.json` (where engine/run/baseline_lookup.py finds it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ghostviewer.analysis.baseline_build import BaselineBuilder
from ghostviewer.analysis.baseline_file import save_baseline
from ghostviewer.analysis.baseline_store import BASELINES_FOLDER, recorded_channel_means
from ghostviewer.analysis.envelope import BaselineError
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.run.baseline_lookup import architecture_of, identity_of, key_settings
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.record import RecordError, RunRecord, StudyWriter
from ghostviewer.spec import RunSpec

ProgressFn = Callable[[dict[str, Any]], None]


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
                builder.add_run(record.stats(), _final_image(record), recorded_channel_means(record),
                                None if clip is None else {"clip_score": float(clip)})
            emit({"event": "baseline_run", "done": done, "total": len(jobs), "verdict": label,
                  "run_dir": result["run_dir"]})
        if builder is None:
            raise GhostError(f"none of the {len(jobs)} runs was healthy: no baseline can be built")
        try:
            baseline = builder.build(meta={"built_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "source": loaded.source,
                                           "prompts": params["prompts"], "seeds": len(set(seeds)),
                                           "study": study.path.name},
                                     architecture=architecture_of(loaded.pipe))
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


# Row values of a prompt list that would make another kind of call than the baseline's text-to-image runs.
CALL_INPUTS = ("init_image", "strength", "mask", "control_image", "lora")


def _refuse_call_inputs(rows: list[dict[str, Any]], where: str) -> None:
    """A baseline is built from plain text-to-image runs; a row naming an img2img/inpaint/ControlNet input or a LoRA
    would silently be built as one, so it is refused, naming the row."""
    for index, row in enumerate(rows, start=1):
        named = [key for key in CALL_INPUTS if row.get(key) not in (None, "", ())]
        if named:
            raise GhostError(f"{where} entry {index} names {named[0]}: a baseline is built from text-to-image runs "
                             "of the pipeline alone (img2img, inpaint, ControlNet and LoRA baselines are not made "
                             "yet); leave it out of the baseline's list")


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
            rows = read_prompt_list(prompts)
        except (PromptListError, OSError) as exc:
            raise GhostError(str(exc)) from None
        _refuse_call_inputs(rows, Path(prompts).name)
        texts = [item["prompt"] for item in rows]
    else:
        prompts = list(prompts)
        _refuse_call_inputs([item for item in prompts if isinstance(item, dict)], "prompts")
        texts = [item["prompt"] if isinstance(item, dict) else str(item) for item in prompts]
    try:
        seed_list = parse_seeds(seeds) if isinstance(seeds, (str, int)) else [int(s) for s in seeds]
    except SeedSpecError as exc:
        raise GhostError(str(exc)) from None
    if not texts or not seed_list:
        raise GhostError("a baseline needs at least one prompt and one seed")
    return texts, seed_list

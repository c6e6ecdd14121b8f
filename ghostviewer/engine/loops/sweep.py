"""Sweeps: every prompt of a list × every seed of a spec, each run traced and judged, recorded as a `sweep` study.

The pipeline is loaded once for the whole sweep. Each run goes into the study's runs folder and into its index
with key {prompt, seed, overrides}, so a resumed sweep (`study_dir=`) skips what is recorded. A run fails by the
CLI's rule (a verdict other than ok, or a first anomaly; or the pipeline raised). Cancelling stops the run in
flight at its next step; that run is not recorded in the study, so resuming makes it again.

With `ray=` the runs go to Ray actors (ghostviewer.engine.loops.sweep_ray); only this driver writes study.sqlite.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ghostviewer.analysis.sweep_stats import SweepStats, verdict_of
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.pipelines import LoadedPipeline, load_pipeline
from ghostviewer.engine.loops.sweep_jobs import (
    Items,
    SweepJob,
    count_jobs,
    frozen_list,
    jobs_or_error,
    parse_seed_spec,
)
from ghostviewer.engine.loops.sweep_ray import ray_results
from ghostviewer.engine.loops.sweep_spec import SWEEP_TENSORS_EVERY, SweepSpec, run_one
from ghostviewer.engine.run.runner import CancelToken
from ghostviewer.record import RecordError, RunRecord, StudyRecord, StudyWriter
from ghostviewer.record.study import canonical_key
from ghostviewer.spec import RunSpec, names
from ghostviewer.spec.prompt_lists import ListOptions

ProgressFn = Callable[[dict[str, Any]], None]
Results = Iterator[tuple[SweepJob, dict[str, Any]]]


def local_results(spec: SweepSpec, jobs: Iterable[SweepJob], runs_dir: Path, cancel: CancelToken,
                  pipeline: Any = None) -> Results:
    """Run the jobs one after another in this process, the pipeline loaded once."""
    from ghostviewer.engine.loops.recorded import wrap_pipeline

    loaded = pipeline if isinstance(pipeline, LoadedPipeline) else None
    for job in jobs:
        if cancel.is_cancelled():
            return
        if loaded is None:
            loaded = wrap_pipeline(pipeline) if pipeline is not None else load_pipeline(
                spec.base.source, spec.base.device, spec.base.dtype, spec.allow_pickle, config=spec.config)
        settings = replace(job.settings(spec.base), source=loaded.source)
        yield job, run_one(loaded, settings, runs_dir, cancel, spec.tensors_every, spec.fingerprints)


def _recorded_runs(study: StudyWriter, steps: int) -> list[dict[str, Any]]:
    """The runs a resumed study already holds, as the run dicts a fresh sweep returns (read from each run's record;
    from the study's index when a record cannot be read). `steps`: the sweep's, for entries without their own."""
    runs = []
    for r in StudyRecord(study.path).runs():
        try:
            runs.append({**RunRecord(r.run_dir).summary(), "status": r.status})
            continue
        except RecordError:
            pass
        image = r.run_dir / "images" / "final.png"
        runs.append({"run_dir": str(r.run_dir), "prompt": r.key.get("prompt"), "seed": r.key.get("seed"),
                     "steps": r.key.get("steps") or steps,
                     "verdict": None if r.verdict is None else {"label": r.verdict},
                     "first_anomaly": r.first_anomaly, "image": str(image) if image.is_file() else None,
                     "status": r.status})
    return runs


def run_sweep(
    items: Items | None = None,
    seeds: str | int | Iterable[int] | None = "0-9",
    *,
    source: str = "demo",
    pipeline: Any = None,
    steps: int = 20,
    guidance: float | None = None,
    negative: str = "",
    faults: Iterable[str] = (),
    bypass: Iterable[str] = (),
    scheduler: str | None = None,
    dtype: str | None = None,
    device: str = "auto",
    trace_depth: str = "block",
    config: str | None = None,
    allow_pickle: bool = False,
    runs_dir: str | Path | None = None,
    study_dir: str | Path | None = None,
    ray: str | None = None,
    tensors_every: int = SWEEP_TENSORS_EVERY,
    fingerprints: bool = False,
    on_progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
    list_options: ListOptions | None = None,
) -> dict[str, Any]:
    """CONTRACT's `sweep` dict ({"runs", "failure_rate", "failed", "total", ...}), recorded as a sweep study.

    `study_dir`: resume that sweep (its list, seeds and settings come from its record unless given again).
    `ray`: "auto", "local" or a cluster address: the runs go to Ray actors. `pipeline`: an object in memory
    (recorded as such), or a LoadedPipeline already loaded from `source` (the engine process's).
    `list_options`: A1111 styles to apply and how dynamic-prompt templates expand; a list with templates or styles
    is read once into frozen rows kept in the study with their provenance (sweep_jobs.frozen_list).
    `fingerprints`: record bit-level fingerprints in every run (off by default: the verdicts and first anomalies
    are the same without them, a sweep is ~5 % faster, and its runs compare with others by their statistics).
    """
    cancel = cancel or CancelToken()
    emit = on_progress or (lambda _event: None)
    if study_dir is not None:
        study = StudyWriter.resume(study_dir, force=True)
        try:
            spec = SweepSpec.from_params(StudyRecord(study.path).params)
        except (KeyError, TypeError, ValueError) as exc:
            study.close()
            raise GhostError(f"{study_dir} is not a sweep study GhostViewer can resume: {exc}") from None
        spec.allow_pickle = allow_pickle  # this command line's, never the record's
        if items is not None:
            spec.items = items
    else:
        if items is None:
            raise GhostError("a sweep needs a prompt list (or a sweep study to resume)")
        seed_list = parse_seed_spec("0-9" if seeds is None else seeds)
        if pipeline is None:
            _check_source(str(source))
        items, provenance = frozen_list(items, list_options)
        base = RunSpec(prompt="", negative_prompt=negative, steps=steps, guidance=guidance,
                           scheduler=scheduler, device=device, dtype=dtype, bypass=names(bypass),
                           faults=names(faults), trace_depth=trace_depth,
                           source=_source_name(source, pipeline),
                           extra={"config": str(Path(config).resolve())} if config else {})
        spec = SweepSpec(items, seed_list, base, seeds if isinstance(seeds, str) else "", config, allow_pickle,
                         tensors_every, fingerprints, {"list_provenance": provenance} if provenance else {})
        study = None
    _check_interventions(spec.base)
    if pipeline is None and study is not None:  # a new sweep's was checked before its list was read
        _check_source(spec.base.source)
    total = count_jobs(spec.items, spec.seeds, spec.base)  # checks the whole list (each row's run) before anything runs
    created = study is None
    if study is None:
        study = StudyWriter.create(Path(runs_dir) if runs_dir else _default_runs_dir(), "sweep",
                                   spec.params(total), total=total)
    empty = False
    try:
        with study:
            try:
                return _drive(study, spec, total, pipeline, ray, emit, cancel)
            except GhostError:
                empty = created and not study.done_keys()
                raise
    finally:
        # Refused before a single run was recorded (a fault that does not fit the pipeline, a pipeline that does
        # not load): the sweep this call created holds nothing worth keeping.
        if empty:
            shutil.rmtree(study.path, ignore_errors=True)


def _source_name(source: str, pipeline: Any) -> str:
    if isinstance(pipeline, LoadedPipeline):
        return pipeline.source
    return str(source) if pipeline is None else f"<in-memory {type(pipeline).__name__}>"


def _check_source(source: str) -> None:
    """A pipeline that is not there is refused before the list is read (a 100,000-row list takes seconds)."""
    from ghostviewer.engine.loading.hub_cache import read_model_index
    from ghostviewer.engine.loading.pipelines import classify_source

    kind, location = classify_source(source)
    if kind == "folder":
        read_model_index(location)


def _check_interventions(base: RunSpec) -> None:
    """Unknown faults and malformed bypass specs are refused before a study is created."""
    from ghostviewer.engine.faults import make_fault
    from ghostviewer.engine.interventions.bypass import BypassConfig

    for name in base.faults:
        make_fault(name)
    for text in base.bypass:
        BypassConfig.parse(text)


def _default_runs_dir() -> Path:
    from ghostviewer.paths import default_runs_dir

    return default_runs_dir()


def _drive(study: StudyWriter, spec: SweepSpec, total: int, pipeline: Any, ray: str | None,
           emit: ProgressFn, cancel: CancelToken) -> dict[str, Any]:
    done_keys = study.done_keys()
    runs = _recorded_runs(study, spec.base.steps) if done_keys else []
    stats = SweepStats()
    for run in runs:
        stats.add_run(run)
    skipped = 0

    def todo() -> Iterator[SweepJob]:
        nonlocal skipped
        for job in jobs_or_error(spec.items, spec.seeds):
            text = canonical_key(job.key())
            if text in done_keys:
                skipped += 1
                continue
            done_keys.add(text)  # a duplicate entry of the list runs once
            yield job

    emit({"event": "sweep_started", "study_dir": str(study.path), "total": total, "done": len(runs)})
    if ray:
        if pipeline is not None:
            raise GhostError("a Ray sweep loads the pipeline on each worker: give a source, not an object")
        def note(message: str) -> None:  # a Ray worker lost or restarted: in the study's events, and shown
            study.event("ray_worker", message, level="warning")
            emit({"event": "sweep_worker", "study_dir": str(study.path), "message": message})

        results = ray_results(spec, todo(), study.runs_dir, cancel, ray, note=note)
    else:
        results = local_results(spec, todo(), study.runs_dir, cancel, pipeline)
    started, made = time.perf_counter(), 0
    for job, result in results:
        if result.get("status") == "cancelled":
            study.event("cancelled", f"run {Path(result['run_dir']).name} cancelled; a resume makes it again")
            continue
        study.add_run(result["run_dir"], job.key(), role="member", summary=result)
        runs.append(result)
        made += 1
        failed = stats.add_run(result)
        done = skipped + made
        study.set_progress(done, total)
        rate = made / max(time.perf_counter() - started, 1e-9)
        emit({"event": "sweep_progress", "study_dir": str(study.path), "done": done, "total": total,
              "rate": round(rate, 4), "eta": round((total - done) / rate, 1),
              "run_dir": result["run_dir"], "prompt": job.prompt, "seed": job.seed,
              "verdict": verdict_of(result), "first_anomaly": result.get("first_anomaly"), "failed": failed,
              "failed_total": stats.failed})
        if made % 10 == 0:
            study.set_result(stats.to_json())
    finished = not cancel.is_cancelled() and skipped + made >= total
    status = "done" if finished else "cancelled"
    study.set_progress(skipped + made, total)
    study.finish(status, result=stats.to_json())
    # "total" is the runs judged (what the rates are out of); "planned" counts the list × seeds, duplicates too.
    return {"runs": runs, **stats.to_json(), "planned": total, "study_dir": str(study.path), "status": status}

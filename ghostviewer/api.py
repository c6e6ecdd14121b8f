"""The Python API: one function per CLI command, each returning the dict that `--json` prints (CONTRACT.md).

`source` is anything `--pipeline` accepts (`"demo"`, a diffusers folder, a `.safetensors` file, a cached hub
id) or a `DiffusionPipeline` already in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ghostviewer.paths import default_runs_dir
from ghostviewer.spec import DEFAULTS, RunSpec, names, validate, with_call_defaults


def _loaded(
    source: Any, device: str = "auto", dtype: str | None = None, allow_pickle: bool = False, config: Any = None
) -> Any:
    from ghostviewer.engine.loading.pipelines import load_pipeline
    from ghostviewer.engine.loops.recorded import wrap_pipeline

    if isinstance(source, (str, Path)):
        return load_pipeline(source, device=device, dtype=dtype, allow_pickle=allow_pickle, config=config)
    return wrap_pipeline(source)


def _entries(value: str | Path | Iterable[str | Path] | None) -> tuple[str, ...]:
    """LoRA entries as given to the API: one file (a string or a Path) or several."""
    if value is None:
        return ()
    if isinstance(value, (str, Path)):
        return (str(value),)
    return tuple(str(entry) for entry in value)


def run(
    source: Any = "demo",
    prompt: str = DEFAULTS.prompt,
    *,
    negative: str = DEFAULTS.negative_prompt,
    seed: int = DEFAULTS.seed,
    steps: int = DEFAULTS.steps,
    guidance: float | None = DEFAULTS.guidance,
    width: int | None = DEFAULTS.width,
    height: int | None = DEFAULTS.height,
    scheduler: str | None = DEFAULTS.scheduler,
    dtype: str | None = DEFAULTS.dtype,
    device: str = DEFAULTS.device,
    bypass: Iterable[str] = DEFAULTS.bypass,
    capture: Iterable[str] = DEFAULTS.capture,
    faults: Iterable[str] = DEFAULTS.faults,
    trace_depth: str = DEFAULTS.trace_depth,
    capture_attention: bool = DEFAULTS.capture_attention,
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    config: str | Path | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    memory_check: bool = True,
    reference: Any = None,
    baseline: str | Path | None = None,
    init_image: str | Path | None = DEFAULTS.init_image,
    strength: float | None = DEFAULTS.strength,
    mask: str | Path | None = DEFAULTS.mask,
    batch: int = DEFAULTS.batch,
    generator_device: str = DEFAULTS.generator_device,
    control_image: str | Path | None = DEFAULTS.control_image,
    controlnet: str | Path | None = DEFAULTS.controlnet,
    controlnet_scale: float | None = DEFAULTS.controlnet_scale,
    lora: str | Path | Iterable[str | Path] | None = None,
    adapters: Iterable[str] = DEFAULTS.adapters,
    fuse_lora: bool = DEFAULTS.fuse_lora,
    attention_backend: str | None = DEFAULTS.attention_backend,
    check_batch_variance: bool = False,
) -> dict[str, Any]:
    """Run the pipeline once, traced and recorded; the CONTRACT `run` dict (verdict, first anomaly, image).
    `lora` (or `adapters`, the RunSpec's name): LoRA files, "FILE" or "FILE:SCALE", loaded for this run only and
    unloaded after it; `fuse_lora` fuses them into the weights for the run.
    `init_image` (a file) makes it img2img at `strength`, with `mask` (a file) inpaint; `control_image` (a file)
    a ControlNet run at `controlnet_scale`, with the pipeline's own ControlNet or `controlnet` (a folder); `batch`
    images per prompt (`images` and `verdicts` one each); `generator_device` where the seed's noise is drawn.
    `guidance=None`: the pipeline family's usual guidance (7.5 for SD and the demo; recorded as used).
    `memory_check=False` runs a size the memory estimate refuses (engine/run/settings.py).
    `reference`: a known-good pipeline (any source) run on the same call; `baseline`: a baseline file to judge
    against (else the exact one, or the nearest of the same architecture) — see `run_spec`.
    `check_batch_variance` (batch 2+): each image made again alone and compared — see `run_spec`."""
    spec = RunSpec(
        prompt=prompt, negative_prompt=negative, seed=seed, steps=steps, guidance=guidance, width=width,
        height=height, scheduler=scheduler, device=device, dtype=dtype, bypass=names(bypass), capture=names(capture),
        faults=names(faults), trace_depth=trace_depth, capture_attention=capture_attention,
        extra={} if memory_check else {"memory_check": False},
        init_image=None if init_image is None else str(init_image), strength=strength,
        mask=None if mask is None else str(mask), batch=batch, generator_device=generator_device,
        control_image=None if control_image is None else str(control_image),
        controlnet=None if controlnet is None else str(controlnet), controlnet_scale=controlnet_scale,
        adapters=(*_entries(lora), *_entries(adapters)),
        fuse_lora=fuse_lora, attention_backend=attention_backend,
    )
    return run_spec(source, spec, runs_dir=runs_dir, allow_pickle=allow_pickle, config=config,
                    on_progress=on_progress, reference=reference, baseline=baseline,
                    check_batch_variance=check_batch_variance)


def run_spec(
    source: Any,
    spec: RunSpec | dict[str, Any],
    *,
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    config: str | Path | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    reference: Any = None,
    baseline: str | Path | None = None,
    check_batch_variance: bool = False,
) -> dict[str, Any]:
    """`run` from a RunSpec (or its dict: unknown keys refused) — what the CLI and the window build; the same
    CONTRACT `run` dict. The spec's `source` and `device` become those of the pipeline actually loaded.
    The dict's `baseline` says what the silent checks compared against ({"file", "match": "exact|architecture|
    given", "differences", …}, None: nothing). `baseline`: a baseline file to use instead of the one found.
    `reference`: a known-good pipeline (source or object) that runs the same call; the dict's `reference` is
    {"run_dir", "first_departure": {"phase", "step", "module", "stat", "ratio", …} | None, "summary", …}.
    `check_batch_variance`: a batch's images are each made again alone from their share of the batch's noise
    (every kind, batch 2+); the dict's `batch_variance` is {"max_abs_diff": [per image],
    "differ": [indices beyond float noise], "tolerance", "batch"}, and the run log has the finding."""
    from dataclasses import replace

    from ghostviewer.engine.run.applied_settings import refuse_unapplied
    from ghostviewer.engine.run.call_inputs import check_generator_device
    from ghostviewer.engine.run.runner import execute_run

    spec = spec if isinstance(spec, RunSpec) else RunSpec.from_dict(spec)
    validate(with_call_defaults(spec))  # what needs no pipeline is refused before a load of seconds
    check_generator_device(spec.generator_device)  # a CUDA generator without CUDA, likewise
    if check_batch_variance:  # a batch of one, likewise (the runner checks again, on the settings it applies)
        from ghostviewer.engine.run.batch_variance import check_batch_request

        check_batch_request(with_call_defaults(spec))
    loaded = _loaded(source, spec.device, spec.dtype, allow_pickle, config)
    refuse_unapplied(loaded, spec.dtype, spec.device)  # a pipeline object is used as it is, never silently
    extra = dict(spec.extra)
    if config and loaded.source_kind == "single_file":
        extra["config"] = str(Path(config).resolve())
    spec = replace(spec, device=loaded.device, source=loaded.source, extra=extra)
    folder = Path(runs_dir) if runs_dir else default_runs_dir()
    good = None if reference is None else _loaded(reference, spec.device, spec.dtype, allow_pickle, None)
    result = execute_run(loaded, spec, folder, on_progress=on_progress,
                         baseline="auto" if baseline is None else Path(baseline),
                         check_batch_variance=check_batch_variance)
    if good is not None and result.get("run_dir"):
        from ghostviewer.engine.run.reference_run import compare_with_reference

        result["reference"] = compare_with_reference(result, good, folder, loaded)
    return result


def replay(
    run_dir: str | Path,
    times: int = 1,
    *,
    pipeline: Any = None,
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Re-run a recorded run `times` times with its exact settings; CONTRACT's `replay` dict.

    `pipeline`: a DiffusionPipeline in memory (with whatever you patched into it) instead of the recorded source.
    """
    from ghostviewer.engine.loops.replay import replay_run

    return replay_run(run_dir, times, pipeline=pipeline, runs_dir=runs_dir, allow_pickle=allow_pickle,
                      on_progress=on_progress)


def compare(run_a: str | Path, run_b: str | Path, *, reference: Any = None, pipeline: Any = None,
            runs_dir: str | Path | None = None, allow_pickle: bool = False) -> dict[str, Any]:
    """Two recorded runs side by side: settings that differ and the first divergence (CONTRACT `compare`).
    `reference`: a known-good pipeline (source or object); the suspect run (B, or A when only A looks bad) is re-run
    on it with its exact call and the dict's `reference` names where the suspect leaves the reference's range
    ({"suspect": "a|b", "suspect_run", "run_dir", "first_departure", "summary", …}; as `run --reference`). The
    reference's run goes to `runs_dir` (default: beside the suspect's). The suspect's own pipeline (`pipeline`, an
    object in memory, else its recorded source reloaded) also runs its call with the reference's modules in lockstep
    on the same inputs, which locates an edited weight at its module (`reference.by` == "same inputs")."""
    from ghostviewer.analysis.compare import compare as compare_folders
    from ghostviewer.engine.errors import GhostError
    from ghostviewer.record import RecordError, RunRecord

    try:
        result = compare_folders(run_a, run_b)
    except RecordError as exc:
        raise GhostError(str(exc)) from None
    if reference is not None:
        from ghostviewer.engine.run.reference_run import compare_runs_with_reference, suspect_of

        _, folder = suspect_of(run_a, run_b)
        recorded = RunSpec.from_record(dict(RunRecord(folder).settings))  # the suspect's device and dtype
        good = _loaded(reference, recorded.device, recorded.dtype, allow_pickle, None)
        mine = None if pipeline is None else _loaded(pipeline)
        if mine is None and recorded.source and not recorded.source.startswith("<"):  # not an object in memory
            try:
                mine = _loaded(recorded.source, good.device, recorded.dtype, allow_pickle, None)
            except GhostError:
                mine = None  # moved or deleted since: the side-by-side runs alone
        result["reference"] = compare_runs_with_reference(run_a, run_b, good, Path(runs_dir) if runs_dir else None,
                                                          mine)
    return result


def bisect(
    run_dir: str | Path,
    settings: str | Path | None = None,
    *,
    pipeline: Any = None,
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Find what breaks a failing run, recorded as a `bisect` study (CONTRACT `bisect`).

    Without `settings`: the single bypassable block whose bypass removes the run's symptom,
    `{"culprit", "reruns", "trail", "reason"?, "study_dir", "patching", ...}`. With `settings` (a good run's
    folder): the fewest settings that turn it bad, `{"culprit_settings", "reruns", "trail", "study_dir", ...}`.
    `pipeline`: a DiffusionPipeline in memory (with whatever you patched into it) instead of the recorded source.
    """
    if settings is not None:
        from ghostviewer.engine.loops.bisect_settings import bisect_settings

        return bisect_settings(run_dir, settings, pipeline=pipeline, runs_dir=runs_dir, allow_pickle=allow_pickle,
                               on_progress=on_progress)
    from ghostviewer.engine.loops.bisect_blocks import bisect_run

    return bisect_run(run_dir, pipeline=pipeline, runs_dir=runs_dir, allow_pickle=allow_pickle,
                      on_progress=on_progress)


def sweep(
    list_or_path: str | Path | Iterable[Any] | None = None,
    seeds: str | int | Iterable[int] = "0-9",
    *,
    source: Any = "demo",
    steps: int = DEFAULTS.steps,
    faults: Iterable[str] = (),
    bypass: Iterable[str] = (),
    resume: str | Path | None = None,
    ray: str | None = None,
    runs_dir: str | Path | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Every prompt × every seed, traced and judged, recorded as a sweep study; CONTRACT's `sweep` dict
    ({"runs", "failure_rate", "failed", "total", "failure_rate_by_seed", "study_dir"}).

    `list_or_path`: a prompt list file (.txt/.csv/.jsonl/.json, streamed) or a list of prompts or dicts.
    `source` may be a DiffusionPipeline in memory. `resume`: a sweep study folder to finish. `ray`: "auto",
    "local" or a cluster address. Other keywords (guidance, negative, dtype, device, scheduler, config,
    allow_pickle, trace_depth, tensors_every, fingerprints, cancel) go to `ghostviewer.engine.loops.sweep.run_sweep`.
    """
    from ghostviewer.engine.loops.sweep import run_sweep

    in_memory = not isinstance(source, (str, Path))
    return run_sweep(list_or_path, seeds, source="demo" if in_memory else str(source),
                     pipeline=source if in_memory else None, steps=steps, faults=faults, bypass=bypass,
                     study_dir=resume, ray=ray, runs_dir=runs_dir, on_progress=on_progress, **settings)


def baseline(
    source: Any = "demo",
    prompts: str | Path | Iterable[Any] | None = None,
    seeds: str | int | Iterable[int] = "0-9",
    *,
    steps: int = DEFAULTS.steps,
    guidance: float | None = None,
    width: int | None = None,
    height: int | None = None,
    scheduler: str | None = None,
    dtype: str | None = None,
    device: str = "auto",
    pairing: str = "product",
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    config: str | Path | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    **call: Any,
) -> dict[str, Any]:
    """Build the pipeline's healthy baseline from prompts × seeds (a `baseline` study) and write it to
    `<runs_dir>/baselines/<key>.json`, where `run` finds it; `{"baseline", "key", "settings", "runs", "healthy",
    "excluded", "modules", "study_dir", "elapsed_s"}`.

    `prompts`: a prompt list file, a list of prompts, or None (the demo pipeline's own prompt set). `pairing`:
    "product" (every prompt with every seed) or "zip" (the i-th prompt with the i-th seed). A pipeline object in
    memory has no weight hashes to key a baseline by: load it from disk. `call`: the call's RunSpec fields for every
    run (init_image, strength, mask, control_image, controlnet, controlnet_scale, adapters, fuse_lora, batch); a list's
    entries may name init_image, strength, mask, control_image and lora themselves.
    """
    from ghostviewer.engine.loops.baseline_build import baseline_inputs, build_baseline

    loaded = _loaded(source, device, dtype, allow_pickle, config)
    texts, seed_list = baseline_inputs(loaded, prompts, seeds)
    return build_baseline(loaded, texts, seed_list, Path(runs_dir) if runs_dir else default_runs_dir(), steps=steps,
                          guidance=guidance, width=width, height=height, scheduler=scheduler, pairing=pairing,
                          dtype=dtype, call=call, on_progress=on_progress)


def blocks(source: Any = "demo", *, allow_pickle: bool = False, config: str | Path | None = None) -> dict[str, Any]:
    """Every component's blocks: `{"blocks": [{"module", "kind", "bypassable"}, …]}`."""
    from ghostviewer.engine.tracing.blocks import discover_blocks

    loaded = _loaded(source, device="cpu", allow_pickle=allow_pickle, config=config)
    return {"blocks": [block.to_json() for block in discover_blocks(loaded.pipe)]}


def faults() -> dict[str, Any]:
    """The ghost lab's fault presets: `{"faults": [{"name", "description", "module"}, …]}`."""
    from ghostviewer.engine.faults import list_faults

    return {"faults": list_faults()}


def export(
    run_dirs: str | Path | Iterable[str | Path],
    path: str | Path,
    *,
    include_tensors: bool = True,
    include_feature_maps: bool = True,
    with_inputs: bool = False,
    pipeline: Any = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    allow_pickle: bool = False,
    issue: bool = False,
) -> dict[str, Any]:
    """Write a bug-report bundle of one run folder or several: `{"bundle", "size", "runs"}`.

    `issue`: also write ISSUE.md (what goes wrong, a diffusers-only reproduction, the first anomaly, this machine's
    `env`) and reproduce.py into the bundle, ready to paste into an upstream issue.

    `with_inputs`: the first bad tensor together with the inputs of the module that produced it — each run whose
    first anomaly is in a module is re-run here (torch) to isolate that module at that step (as `isolate` does),
    and its inputs, weights, config and standalone repro.py go under runs/<run_id>/isolate/; every run's manifest
    entry says what was isolated, or why nothing was (`isolate`), and so does each run's `isolate` here.
    `pipeline`: the pipeline the runs were made with, already loaded (a LoadedPipeline or a DiffusionPipeline);
    `on_progress` gets {"event": "isolating", "run_id", "module", "step"} before each re-run.
    """
    from ghostviewer.record.bundle import export_bundle

    dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    options: dict[str, Any] = {"include_tensors": include_tensors, "include_feature_maps": include_feature_maps}
    if issue:
        from ghostviewer.system_info import format_report

        options["issue_env"] = format_report(env())
    if not with_inputs:
        return export_bundle(dirs, path, **options)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ghostviewer-inputs-") as work:
        isolated, why = _isolate_first_anomalies(dirs, Path(work), pipeline, on_progress, allow_pickle)
        return export_bundle(dirs, path, isolated=isolated, not_isolated=why, **options)


def _isolate_first_anomalies(
    dirs: list[str | Path], work: Path, pipeline: Any, on_progress: Callable[[dict[str, Any]], None] | None,
    allow_pickle: bool = False,
) -> tuple[dict[str, Path], dict[str, str]]:
    """Isolate each run's first anomalous module into work/<run_id>; ({run_id: folder}, {run_id: why not})."""
    import logging

    from ghostviewer.engine.errors import GhostError
    from ghostviewer.engine.isolation.isolate import isolate_module
    from ghostviewer.engine.loading.pipelines import LoadedPipeline
    from ghostviewer.engine.loops.recorded import PipelineCache, fits_run, open_recorded
    from ghostviewer.record import RecordError, RunRecord
    from ghostviewer.record.types import CALLBACK_LATENTS

    records = [RunRecord(run_dir) for run_dir in dirs]  # RecordError (one line) before any re-run
    cache = PipelineCache(pipeline=None if pipeline is None or isinstance(pipeline, LoadedPipeline) else pipeline,
                          allow_pickle=allow_pickle)
    isolated: dict[str, Path] = {}
    why: dict[str, str] = {}
    for run_dir, record in zip(dirs, records, strict=True):
        anomaly = record.first_anomaly or {}
        module, step = str(anomaly.get("module") or ""), anomaly.get("step")
        if not module:
            why[record.run_id] = "the run has no first anomaly: no bad tensor, so no module inputs to capture"
            continue
        if module.startswith("pipeline."):
            maker = "your own step callback (callback_on_step_end)" if module == CALLBACK_LATENTS \
                else "the pipeline itself"
            why[record.run_id] = (f"the first bad tensor is {module}, made by {maker}, not by a module: "
                                  "there are no module inputs to capture (the record holds that tensor)")
            continue
        if on_progress is not None:
            on_progress({"event": "isolating", "run_id": record.run_id, "module": module, "step": step})
        try:
            _, settings = open_recorded(run_dir)
            same = fits_run(pipeline, record, settings)
            result = isolate_module(run_dir, module, None if step is None else int(step), work / record.run_id,
                                    pipeline=pipeline if same else cache.get(settings))
        except (GhostError, RecordError) as exc:
            why[record.run_id] = f"{module} could not be isolated: {exc}"
            continue
        except Exception as exc:  # noqa: BLE001 - the bundle still gets written, and says why in one line
            logging.getLogger("ghostviewer").warning("isolating %s of %s failed", module, record.run_id, exc_info=True)
            why[record.run_id] = f"{module} could not be isolated: {type(exc).__name__}: {' '.join(str(exc).split())}"
            continue
        isolated[record.run_id] = Path(result["out_dir"])
    return isolated, why


def env() -> dict[str, Any]:
    """This machine as a bug report needs it (`ghostviewer env`): platform, Python, the versions diffusers-cli env
    lists and those it omits (PEFT, xFormers, Triton…), torch's build, CUDA, cuDNN, GPUs, attention backends and
    determinism flags."""
    from ghostviewer.engine.run.environment import torch_report

    return torch_report()


def prune(runs_dir: str | Path, *, older_than: str | float | None = None, verdict: Iterable[str] | str | None = None,
          keep_anomalies: bool = False, keep_last: int | None = None, dry_run: bool = False) -> dict[str, Any]:
    """`ghostviewer prune`: remove the records of a runs folder older than `older_than` ('7d', '12h', days as a
    number) / of a `verdict` / beyond the newest `keep_last`, keeping anomalous ones with `keep_anomalies`; never a
    record being written, never anything that is not a record. `{"removed", "bytes_freed", "kept", "left", …}`."""
    from ghostviewer.record.prune import prune as prune_folder

    return prune_folder(runs_dir, older_than, verdict, keep_anomalies, keep_last, dry_run)


def inspect(path: str | Path) -> dict[str, Any]:
    """A bundle's read-only summary, every member checked: `{"manifest", "runs", "files"}` (runs nothing)."""
    from ghostviewer.record.bundle import inspect_bundle

    return inspect_bundle(path)


def isolate(
    run_dir: str | Path,
    *,
    module: str,
    step: int | None = None,
    out: str | Path,
    fuzz: bool = False,
    pipeline: Any = None,
    allow_pickle: bool = False,
) -> dict[str, Any]:
    """Save a module's real inputs, weights and config from a re-run of `run_dir`, with a standalone repro.py;
    `{"module", "class", "step", "out_dir", "inputs", "output", "rebuildable", "repro", …}`, plus `"fuzz"` (the
    table of varied inputs and which break it; `"on"` says what was fuzzed: the live module in memory when it
    cannot be rebuilt) when `fuzz`. `pipeline`: the object the run was made with."""
    from ghostviewer.engine.isolation.isolate import isolate_module

    return isolate_module(run_dir, module, step, out, pipeline=pipeline, allow_pickle=allow_pickle, fuzz=fuzz)


def audit(source: Any = "demo", reference: Any = None) -> dict[str, Any]:
    """Check the weights before anything runs (`ghostviewer audit`): `{"ok", "findings": [{"component", "tensor",
    "kind": "nan|inf|fp16_range|zero|differs", "detail"}, …], "same_as_reference", "blocks", "components",
    "skipped", "rules", "bytes", "elapsed_s"}`. `ok` is False when a weight is bad; with `reference` (a known-good
    copy, any source) every tensor that differs is listed with its relative change and grouped by block in
    `blocks`. Files are read with safe_open one tensor at a time (never a pickle); a pipeline object in memory by
    its components' state dicts."""
    from ghostviewer.engine.judge_model.audit import audit_weights

    return audit_weights(source, reference)


def probe(
    source: Any = "demo",
    prompt: str | None = None,
    *,
    seed: int = 0,
    steps: int = 10,
    probes: Iterable[str] | None = None,
    device: str = "auto",
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    config: str | Path | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The model-agnostic probe battery (`ghostviewer probe`), recorded as a `probe` study: `{"findings": [{"probe",
    "ok", "finding", "evidence", "bug_class", "compared"}, …], "ok", "failed", "study_dir", "runs", "elapsed_s"}` —
    prompt, negative prompt, guidance and seed each have an effect, the same seed gives the same image, float16 and
    the SDPA math kernel agree with the default run (else where they part, by module), and more steps converge.
    `probes`: some of engine/judge_model/probes.py's PROBE_NAMES (default: all)."""
    from ghostviewer.engine.loops.probe import run_probes

    loaded = _loaded(source, device, None, allow_pickle, config)
    return run_probes(loaded, Path(runs_dir) if runs_dir else default_runs_dir(), prompt=prompt, seed=seed,
                      steps=steps, probes=None if probes is None else names(probes), allow_pickle=allow_pickle,
                      config=config, on_progress=on_progress)

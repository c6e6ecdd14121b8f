"""GhostViewer's own run: build the call from the RunSpec (the scheduler, bypasses and faults installed, sizes and
guidance filled in), then record it with the one recorder (recorder.py) that also records a user's watched calls.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.faults import make_fault
from ghostviewer.engine.interventions.base import RunContext, applied, own_call, users_hooks_set_aside
from ghostviewer.engine.interventions.bypass import Bypass
from ghostviewer.engine.interventions.dtype_bridge import DtypeBridge
from ghostviewer.engine.loading.loras import LoraFile, loras_loaded, read_loras
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.loading.schedulers import set_scheduler
from ghostviewer.engine.run.applied_settings import AttentionBackend, component_configs, refuse_unapplied
from ghostviewer.engine.run.batch_variance import check_batch_request, with_batch_variance
from ghostviewer.engine.run.call_inputs import (
    CallInputs,
    batch_init_latents,
    check_generator_device,
    pipeline_for,
    read_inputs,
)
from ghostviewer.engine.run.lora_effect import preexisting
from ghostviewer.engine.run.record_buffer import BufferedWriter
from ghostviewer.engine.run.recorder import (
    CancelToken,
    PipelineCall,
    ProgressFn,
    RecordOptions,
    RunCancelled,
    RunFailed,
    record_call,
)
from ghostviewer.engine.run.settings import validate_for_pipeline
from ghostviewer.engine.tracing.prompt_tokens import prompt_embeddings, prompt_tokens
from ghostviewer.spec import RunSpec, resolve_seed, validate, with_call_defaults
from ghostviewer.spec.loras import LoraEntry, parse_lora

__all__ = ["CancelToken", "RunCancelled", "RunFailed", "build_call", "build_interventions", "execute_run",
           "prepare_settings"]


def _native_size(pipe: Any) -> int:
    return adapter_for(pipe).native_size(pipe)


def prepare_settings(loaded: LoadedPipeline, settings: RunSpec) -> tuple[RunSpec, list[str]]:
    """Validate, pick the seed for -1, install the scheduler, fill in sizes and the family's usual guidance
    (when guidance is None): the settings as they will run."""
    if settings.guidance is None:
        settings = replace(settings, guidance=adapter_for(loaded.pipe).guidance)
    settings = with_call_defaults(settings)  # diffusers' strength (img2img/inpaint) or ControlNet scale, recorded
    validate(settings)
    inputs = read_inputs(settings)  # the init image and mask or the control image, read and checked before anything
    refuse_unapplied(loaded, settings.dtype, None)  # an object in memory runs as it is: never record another dtype
    check_generator_device(settings.generator_device, loaded.device)
    seed, note = resolve_seed(settings.seed)
    scheduler = set_scheduler(loaded.pipe, settings.scheduler, settings.steps)
    size = _native_size(loaded.pipe)
    width, height = inputs.size(settings.width, settings.height) if inputs else (settings.width, settings.height)
    resolved = replace(
        settings,
        seed=seed,
        scheduler=scheduler,
        width=width or size,
        height=height or size,
        device=loaded.device,
        **(inputs.paths() if inputs else {}),
        **({"controlnet": str(Path(settings.controlnet).resolve())} if settings.controlnet else {}),
        # each LoRA as an absolute path with its scale written out: the record says both
        adapters=tuple(LoraEntry(str(Path(e.path).resolve()), e.scale).text()
                       for e in map(parse_lora, settings.adapters)),
    )
    # capture patterns (a ControlNet's modules among them), the device's memory
    checked = pipeline_for(loaded, resolved) if resolved.control_image is not None else loaded
    validate_for_pipeline(checked.pipe, loaded.device, resolved)
    notes = [note] if note else []
    if inputs and inputs.control_image is not None and inputs.control_image.size != (resolved.width, resolved.height):
        w, h = inputs.control_image.size
        notes.append(f"the control image ({w}×{h}) is resized to the run's {resolved.width}×{resolved.height}, "
                     "as diffusers does")
    return resolved, notes


def build_interventions(loaded: LoadedPipeline, settings: RunSpec) -> list[Any]:
    """Bypasses and faults, checked against the pipeline before anything is recorded."""
    bypasses = [Bypass(spec) for spec in settings.bypass_specs]
    for bypass in bypasses:
        bypass.check(loaded.pipe)
    bridge = [DtypeBridge()] if DtypeBridge.needed(loaded.pipe) else []
    backend = [AttentionBackend(settings.attention_backend)] if settings.attention_backend else []
    for each in backend:  # refused in one line before anything is recorded, never silently not applied
        each.check(loaded.pipe)
    faults = [make_fault(name) for name in settings.faults]
    _check_faults_fit(loaded.pipe, settings, faults)
    # Faults prepend their output hooks and a bypass appends its own, so on a block that has both the fault runs
    # first and the bypass then replaces the faulty output. The other way round, bypassing a block would not
    # remove a fault hooked on that very block (fp16-vae-overflow), and bisection could never name it.
    return [*backend, *bridge, *bypasses, *faults]


def _check_faults_fit(pipe: Any, settings: RunSpec, faults: list[Any]) -> None:
    """Apply each fault and take it off again before anything is recorded: a preset made for another family (a
    U-Net block on a transformer pipeline) is a usage error, said in one line, not a failed run."""
    ctx = RunContext(pipe=pipe, prompt=settings.prompt, negative_prompt=settings.negative_prompt,
                     seed=int(settings.seed), current_step=lambda: None)
    for fault in faults:
        try:
            with torch.inference_mode(), applied([fault], ctx):  # as the run applies them
                pass
        except GhostError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the preset tripped on: it does not fit
            text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc  # KeyError's str() adds quotes
            reason = " ".join(str(text).split()) or type(exc).__name__
            raise GhostError(f"the fault {fault.name!r} does not fit this pipeline "
                             f"({type(pipe).__name__}): {reason}") from exc


def execute_run(
    loaded: LoadedPipeline,
    settings: RunSpec,
    runs_dir: Path,
    cancel: CancelToken | None = None,
    on_progress: ProgressFn | None = None,
    *,
    tensors_every: int = 1,
    baseline: Any = "auto",
    flight: bool = True,
    fingerprints: bool = True,
    check_batch_variance: bool = False,
) -> dict[str, Any]:
    """Run the pipeline once with tracing and interventions; return CONTRACT's `run` dict.

    `check_batch_variance` (a batch of 2 or more): each image is made again alone from its share of the batch's
    noise and compared (batch_variance.py); the dict's `batch_variance` says by how much each differs.

    `baseline`: "auto" uses the pipeline's baseline for these settings when there is one
    (engine/loops/baseline_build.py), None checks no drift (a baseline build's own runs), or a Baseline object to use.

    `tensors_every`: k > 1 writes the step tensors (latents, x0, previews) only every k-th step and at the last
    one (sweeps); statistics and fingerprints are recorded at every step whatever k, so the verdict and the first
    anomaly are those of a full run.

    `flight`: False (sweeps) writes the whole record when the run ends instead of as it goes
    (record_buffer.py, hold): the same record, but a run killed midway leaves none of its steps.

    `fingerprints`: False (sweeps) records no bit-pattern fingerprints (environment["fingerprint"] = "none"): the
    verdict and first anomaly are the same; comparing the run with another goes by its statistics.
    """
    original_scheduler = loaded.pipe.scheduler  # a run's --scheduler must not leak into the next run
    try:
        settings, notes = prepare_settings(loaded, settings)
        if check_batch_variance:
            check_batch_request(settings)
        # img2img/inpaint/controlnet: the same components in diffusers' pipeline class for the kind (from_pipe: no
        # reload; a ControlNet joins them), recorded as that pipeline, so its own probes (prepare_latents), step count
        # and ControlNet blocks are what is traced — and what a bypass or fault may name
        made = pipeline_for(loaded, settings)
        loras = read_loras(made.pipe, settings.adapters)  # readable safetensors, keys on the pipeline's modules
        interventions = build_interventions(made, settings)
        options = RecordOptions(tensors_every=max(1, int(tensors_every)), baseline=baseline, flight=flight,
                                fingerprints=fingerprints, cancel=cancel, on_progress=on_progress)
        # adapters loaded before the run that it does not name (read_loras refuses them when it names LoRAs)
        left = preexisting(made.pipe)
        with loras_loaded(made.pipe, loras, settings.fuse_lora):  # always unloaded after the run
            call = _with_loras(build_call(made, settings), loras, settings.fuse_lora, left)
            check = None
            if check_batch_variance:  # the solo calls run after the batch's, before its record closes
                call, check = with_batch_variance(call, build_call(made, replace(settings, batch=1)), made.pipe,
                                                  settings, build_interventions(made, settings))
            result = record_call(_lora_hashes(made, loras), settings, call, Path(runs_dir), interventions, notes,
                                 options)
            if check is not None and check.report:
                result["batch_variance"] = check.report
            return result
    finally:
        loaded.pipe.scheduler = original_scheduler


def _with_loras(call: PipelineCall, loras: list[LoraFile], fused: bool, findings: list[Any]) -> PipelineCall:
    """The call with its LoRAs in the record's environment (file, sha256, scale, adapter) and the finding of
    adapters the run found loaded already."""
    if not loras and not findings:
        return call
    environment = {**call.environment, "loras": [lora.describe(fused) for lora in loras]} if loras else \
        call.environment
    return replace(call, environment=environment, late_events=lambda: [*call.late_events(), *findings])


def _lora_hashes(loaded: LoadedPipeline, loras: list[LoraFile]) -> LoadedPipeline:
    """The LoRAs' hashes beside the pipeline's weights: a baseline of the pipeline alone is no exact match."""
    if not loras or not loaded.weight_hashes:
        return loaded
    return replace(loaded, weight_hashes={**loaded.weight_hashes,
                                          **{f"lora_{i}": lora.sha256[:16] for i, lora in enumerate(loras)}})


def build_call(loaded: LoadedPipeline, settings: RunSpec) -> PipelineCall:
    """GhostViewer's own call, from the spec as it will run: its kind's inputs (the init image and mask, or the
    control image, read again from their files and recorded as PNG beside the run), `batch` images per prompt, on the
    spec's generator device.
    `loaded` holds the pipeline for the kind (pipeline_for)."""
    pipe = loaded.pipe
    family = adapter_for(pipe)
    # an object may have been patched; a LoRA may change the text encoder
    cache = None if loaded.source_kind == "memory" or settings.adapters else loaded.prompt_cache
    inputs = read_inputs(settings) or CallInputs()
    kind_kwargs = inputs.call_kwargs(settings)

    def invoke(observe: dict[str, Any]) -> Any:
        generator = torch.Generator(device=settings.generator_device).manual_seed(settings.seed)
        kwargs = dict(kind_kwargs)
        if inputs.init_image is not None:  # a batch's img2img: the init latents once per image, as diffusers asks
            latents = batch_init_latents(pipe, inputs.init_image, settings, generator)
            kwargs.update({} if latents is None else {"image": latents})
        return pipe(
            prompt=settings.prompt,
            negative_prompt=family.negative_prompt(settings.negative_prompt),
            num_inference_steps=settings.steps,
            guidance_scale=settings.guidance,
            generator=generator,
            num_images_per_prompt=settings.batch,
            output_type="np",
            **kwargs,
            **observe,
            **family.call_kwargs,
        )

    return PipelineCall(
        invoke=invoke,
        images=lambda output: list(output.images[: settings.batch]),
        prompts=[settings.prompt],
        record_prompt=lambda writer: _record_prompt(pipe, settings.prompt, writer, cache),
        samples=settings.batch if settings.batch > 1 else None,
        save_inputs=inputs.save,
        environment={"component_configs": component_configs(pipe)},  # the scheduler as installed for this run
    )


PROMPT_CACHE_SIZE = 16


def _record_prompt(pipe: Any, prompt: str, writer: BufferedWriter, cache: dict[str, Any] | None = None) -> None:
    """Token ids, token strings and embeddings of the prompt, before any fault touches the text encoder.
    `cache` (a pipeline loaded from disk): prompts encoded by earlier runs, the last PROMPT_CACHE_SIZE."""
    if getattr(pipe, "tokenizer", None) is None or getattr(pipe, "text_encoder", None) is None:
        return
    if cache is not None and prompt in cache:
        tokens, embeddings = cache[prompt]
    else:
        # not one of the pipeline's calls: isolate's call numbering skips it, and the user's hooks do not see it
        with torch.inference_mode(), own_call(), users_hooks_set_aside(pipe.text_encoder):
            tokens = prompt_tokens(pipe, prompt)
            embeddings = prompt_embeddings(pipe, prompt)
        if cache is not None:
            while len(cache) >= PROMPT_CACHE_SIZE:
                cache.pop(next(iter(cache)))
            cache[prompt] = (tokens, embeddings)
    writer.save_tensors("prompt", {"ids": np.asarray(tokens["ids"], np.int64), **embeddings})
    writer.event("prompt", f"{len(tokens['ids'])} tokens: {' '.join(tokens.get('labels', tokens['tokens']))}", **tokens)

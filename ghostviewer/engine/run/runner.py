"""One traced run of a pipeline, recorded as it goes: the flight recorder's main loop.

Encode-phase stats are committed when the initial latents are drawn, each denoising step is committed from
`callback_on_step_end` (from `scheduler.step` for pipelines without it, such as PixArt), the decode phase after
the pipeline returns; the final image is written even when it
is black or NaN. Cancellation raises from the step callback, so the run stops at once and is marked cancelled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ghostviewer.analysis.anomaly import AnomalyDetector
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.faults import make_fault
from ghostviewer.engine.interventions.attention_capture import (
    DENOISER_PATTERNS,
    AttentionCapture,
    AttentionCaptureConfig,
)
from ghostviewer.engine.interventions.base import RunContext, applied
from ghostviewer.engine.interventions.bypass import Bypass, BypassConfig
from ghostviewer.engine.interventions.dtype_bridge import DtypeBridge
from ghostviewer.engine.interventions.probes import PipelineProbes
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR, LoadedPipeline, describe_source
from ghostviewer.engine.loading.schedulers import set_scheduler
from ghostviewer.engine.run.environment import describe_environment
from ghostviewer.engine.run.judge import RunJudge
from ghostviewer.engine.run.record_buffer import BufferedWriter
from ghostviewer.engine.run.settings import validate_for_pipeline
from ghostviewer.engine.tracing.memory import read_memory, reset_peak
from ghostviewer.engine.tracing.preview import LatentPreview
from ghostviewer.engine.tracing.prompt_tokens import prompt_embeddings, prompt_tokens
from ghostviewer.engine.tracing.tracer import TraceConfig, Tracer
from ghostviewer.record import RunWriter, StepInfo
from ghostviewer.record.types import NO_FINGERPRINTS
from ghostviewer.spec import RunSpec, resolve_seed, validate

ProgressFn = Callable[[dict[str, Any]], None]


class RunCancelled(Exception):
    """Raised inside the pipeline's step callback to stop a run the user cancelled."""


class RunFailed(Exception):
    """The pipeline itself raised during a run; the partial record is kept at `run_dir`."""

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir = run_dir


class CancelToken:
    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    def is_cancelled(self) -> bool:
        return self._event.is_set()


def _host(tensor: torch.Tensor) -> np.ndarray:
    """A host copy of the first batch item (a copy: the pipeline may reuse the tensor's memory)."""
    return tensor.detach()[0].to("cpu", torch.float32, copy=True).numpy()


def _pipeline_folder(loaded: LoadedPipeline) -> Path | None:
    if loaded.source_kind == "demo":
        return DEMO_PIPELINE_DIR
    return Path(loaded.source) if loaded.source_kind == "folder" else None


def _native_size(pipe: Any) -> int:
    return adapter_for(pipe).native_size(pipe)


def prepare_settings(loaded: LoadedPipeline, settings: RunSpec) -> tuple[RunSpec, list[str]]:
    """Validate, pick the seed for -1, install the scheduler, fill in sizes and the family's usual guidance
    (when guidance is None): the settings as they will run."""
    if settings.guidance is None:
        settings = replace(settings, guidance=adapter_for(loaded.pipe).guidance)
    validate(settings)
    seed, note = resolve_seed(settings.seed)
    scheduler = set_scheduler(loaded.pipe, settings.scheduler)
    size = _native_size(loaded.pipe)
    resolved = replace(
        settings,
        seed=seed,
        scheduler=scheduler,
        width=settings.width or size,
        height=settings.height or size,
        device=loaded.device,
    )
    validate_for_pipeline(loaded.pipe, loaded.device, resolved)  # capture patterns, the device's memory
    return resolved, [note] if note else []


def build_interventions(loaded: LoadedPipeline, settings: RunSpec) -> list[Any]:
    """Bypasses and faults, checked against the pipeline before anything is recorded."""
    bypasses = [Bypass(BypassConfig.parse(spec)) for spec in settings.bypass]
    for bypass in bypasses:
        bypass.check(loaded.pipe)
    bridge = [DtypeBridge()] if DtypeBridge.needed(loaded.pipe) else []
    faults = [make_fault(name) for name in settings.faults]
    _check_faults_fit(loaded.pipe, settings, faults)
    # Faults prepend their output hooks and a bypass appends its own, so on a block that has both the fault runs
    # first and the bypass then replaces the faulty output. The other way round, bypassing a block would not
    # remove a fault hooked on that very block (fp16-vae-overflow), and bisection could never name it.
    return [*bridge, *bypasses, *faults]


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
) -> dict[str, Any]:
    """Run the pipeline once with tracing and interventions; return CONTRACT's `run` dict.

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
        return _execute(loaded, settings, runs_dir, cancel, on_progress, max(1, int(tensors_every)), baseline, flight,
                        fingerprints)
    finally:
        loaded.pipe.scheduler = original_scheduler


def _execute(
    loaded: LoadedPipeline,
    settings: RunSpec,
    runs_dir: Path,
    cancel: CancelToken | None,
    on_progress: ProgressFn | None,
    tensors_every: int = 1,
    baseline: Any = "auto",
    flight: bool = True,
    fingerprints: bool = True,
) -> dict[str, Any]:
    settings, notes = prepare_settings(loaded, settings)
    interventions = build_interventions(loaded, settings)
    pipe = loaded.pipe
    tracer = Tracer(pipe, TraceConfig(depth=settings.trace_depth, capture=tuple(settings.capture),  # type: ignore[arg-type]
                                      fingerprints=fingerprints))
    # A bypassed block's insides still compute, but while the bypass is active their outputs are not the
    # run's: they are not recorded, so the first anomaly never names a module inside a bypassed block.
    tracer.muted = [b.config for b in interventions if isinstance(b, Bypass)]
    environment = {**describe_environment(loaded.device), "pipeline": describe_source(loaded)}
    environment["determinism"] = {**environment.get("determinism", {}), "generator_device": "cpu"}
    if not fingerprints:
        environment["fingerprint"] = NO_FINGERPRINTS
    # The record is written in batches between steps (record_buffer.py); events are emitted here, each once its
    # writes are committed.
    writer = BufferedWriter(lambda: RunWriter.create(Path(runs_dir), settings.to_dict(), environment), hold=not flight)
    emit = on_progress or (lambda _event: None)
    judge = RunJudge(loaded, settings, runs_dir, tracer.modules, tracer.muted, baseline)  # baseline, prompt check
    detector = judge.detector()
    started = time.perf_counter()

    def commit_rows() -> tuple[Future[Any], dict[str, np.ndarray]]:
        """Queue what the hooks queued for the next batch, which turns it into columns, feeds the anomaly detector
        and stores them; returns (the first anomaly once done, the feature maps)."""
        batch = tracer.take()

        def store(w: RunWriter) -> dict[str, Any] | None:
            columns = Tracer.harvest(batch).columns
            detector.feed_columns(columns)
            w.add_stats(columns)
            return detector.first

        return writer.submit(store), batch.feature_maps

    def end(status: str, message: str, level: str, error: str | None = None) -> None:
        """Close the record whatever happened: pending rows, the first anomaly so far, the status."""
        try:
            commit_rows()
        except Exception:  # noqa: BLE001 - the rows of a broken step are the least of it; close the record
            pass
        writer.event("run", message, level=level)
        writer.submit(lambda w: w.set_verdict(None, detector.first))  # the detector is fed as the batch is written
        try:
            writer.finish(status, time.perf_counter() - started, error=error)
        except Exception:  # noqa: BLE001 - the record cannot take its status (it is closed, and reads interrupted)
            pass  # the run's own error is what is reported
        writer.release(emit)  # the events of the steps committed before the end

    try:
        for note in notes:
            writer.event("settings", note)
        judge.log(writer)
        return _record_run(
            loaded, settings, interventions, writer, tracer, detector, commit_rows, started, cancel, emit,
            tensors_every, judge,
        )
    except RunCancelled:
        end("cancelled", "cancelled by the user", "warning")
        emit({"event": "cancelled", "run_dir": str(writer.path), "first_anomaly": detector.first})
        return {
            **_summary(writer.path, settings, None, detector.first, None, time.perf_counter() - started),
            "status": "cancelled",
        }
    except GhostError as exc:
        writer.raise_if_not_created()
        end("failed", str(exc), "error", error=str(exc))
        emit({"event": "failed", "run_dir": str(writer.path), "error": str(exc), "first_anomaly": detector.first})
        raise
    except Exception as exc:  # the pipeline (or an intervention) broke: keep the record, report it
        writer.raise_if_not_created()  # no record at all (e.g. an unwritable runs folder): that error, as before
        message = f"{type(exc).__name__}: {exc}"
        end("failed", message, "error", error=message)
        emit({"event": "failed", "run_dir": str(writer.path), "error": message, "first_anomaly": detector.first})
        raise RunFailed(message, writer.path) from exc
    except BaseException:  # KeyboardInterrupt, SystemExit: the record is closed before the process goes
        end("cancelled", "interrupted", "warning", error="interrupted")
        raise
    finally:
        if not writer.finished:  # a bug in the code above must still leave a closed record
            writer.finish("failed", time.perf_counter() - started, error="the run ended unexpectedly")


def _record_run(
    loaded: LoadedPipeline,
    settings: RunSpec,
    interventions: list[Any],
    writer: BufferedWriter,
    tracer: Tracer,
    detector: AnomalyDetector,
    commit_rows: Callable[[], tuple[Future[Any], dict[str, np.ndarray]]],
    started: float,
    cancel: CancelToken | None,
    emit: ProgressFn,
    tensors_every: int = 1,
    judge: RunJudge | None = None,
) -> dict[str, Any]:
    """The traced pipeline call itself; every exit path of the record is handled by the caller."""
    judge = judge or RunJudge(loaded, settings, ".", tracer.modules, tracer.muted, None)
    pipe = loaded.pipe
    family = adapter_for(pipe)  # the family's conventions: packed latents, step callback, call keywords
    tracer.latent_hw = family.latent_hw(pipe, settings.height, settings.width)
    attention = (
        [AttentionCapture(AttentionCaptureConfig(patterns=DENOISER_PATTERNS))] if settings.capture_attention else []
    )
    for capture in attention:
        capture.fallback_hw = tracer.latent_hw

    def unpacked(latents: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) whatever the pipeline keeps
        return family.unpack_latents(pipe, latents, settings.height, settings.width)

    def write_due() -> None:  # from a tracer hook, in the middle of a step or of the decode
        writer.release(emit)
        tracer.deadline = writer.due_at()

    tracer.on_deadline = write_due
    writer.after(lambda: {"event": "started", "run_dir": str(writer.path), "steps": settings.steps})
    # An object in memory may have been patched since the last run: encoded afresh.
    _record_prompt(pipe, settings.prompt, writer, None if loaded.source_kind == "memory" else loaded.prompt_cache)
    preview = LatentPreview.for_pipeline(pipe, _pipeline_folder(loaded))
    state: dict[str, Any] = {"x0": None, "mark": time.perf_counter(), "mem": read_memory(loaded.device)}

    def on_initial(latents: torch.Tensor) -> None:
        commit_rows()  # the encode phase, and the initial latents' own stats
        writer.save_tensors("initial_noise", {"latents": _host(unpacked(latents))})
        writer.release(emit, now=True)  # the record is on disk from here: the encode phase and the first latents
        tracer.deadline = writer.due_at()
        state["mark"] = time.perf_counter()
        reset_peak(loaded.device)

    def on_x0(x0: torch.Tensor) -> None:
        state["x0"] = x0

    def on_step_end(_pipe: Any, index: int, timestep: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        first, maps = commit_rows()
        keep = index % tensors_every == 0 or index == settings.steps - 1
        host: dict[str, np.ndarray] = {}
        if keep:
            latents = _host(unpacked(kwargs["latents"]))
            host.update(latents=latents, x0=_host(unpacked(state["x0"])) if state["x0"] is not None else latents)
        extra = {f"fm/{name}": fmap for name, fmap in maps.items()}
        for capture in attention:
            extra.update(capture.harvest())

        def tensors() -> dict[str, np.ndarray]:  # when the batch is written, from the host copies
            out = dict(host)
            if host:
                # Previews go into the step's safetensors as uint8 RGB: a PNG per step costs more than the step.
                out.update(preview=preview(host["x0"]), latents_preview=preview(host["latents"]))
            return {**out, **extra}

        now, before, after = time.perf_counter(), state["mem"], read_memory(loaded.device)
        sigmas = getattr(pipe.scheduler, "sigmas", None)
        sigma = float(sigmas[index]) if sigmas is not None and index < len(sigmas) else None
        info = StepInfo(
            index=index,
            timestep=float(timestep),
            sigma=sigma,
            wall_s=now - state["mark"],
            mem_before=before.used,
            mem_after=after.used,
            mem_peak=after.peak,
            mem_kind=after.kind,
        )
        writer.add_step(info, tensors)
        state.update(mem=after, x0=None)
        reset_peak(loaded.device)
        # Sent once the step is committed: readers of the record can show it.
        writer.after(lambda: {"event": "step", "run_dir": str(writer.path), "step": index, "steps": settings.steps,
                              "first_anomaly": first.result()})
        writer.release(emit, now=index == settings.steps - 1)  # the decode that follows never holds steps back
        writer.check()  # a record that cannot be written fails the run now
        tracer.deadline = writer.due_at()
        state["mark"] = time.perf_counter()  # after the batch: writing it is not the next step's time
        tracer.step = index + 1
        if cancel is not None and cancel.is_cancelled():
            raise RunCancelled()
        return {}

    ctx = RunContext(
        pipe=pipe,
        prompt=settings.prompt,
        negative_prompt=settings.negative_prompt,
        seed=settings.seed,
        current_step=lambda: tracer.step,
        record_tensor=tracer.record,
    )
    # Without `callback_on_step_end` (PixArt swallows it), each scheduler step ends the denoising step.
    callback = family.has_step_callback(pipe)
    steps_seen = iter(range(10**9))

    def on_scheduler_step(timestep: Any, latents: torch.Tensor) -> None:
        on_step_end(pipe, next(steps_seen), timestep, {"latents": latents})

    observe: dict[str, Any] = (
        {"callback_on_step_end": on_step_end, "callback_on_step_end_tensor_inputs": ["latents"]} if callback else {}
    )
    probes = PipelineProbes(on_x0=on_x0, on_initial=on_initial, on_step=None if callback else on_scheduler_step)
    # The tracer's hooks go on last, so it records what each module hands on: after faults, the user's own
    # hooks and bypasses (bypass.py) have had their say.
    with torch.inference_mode(), applied([*interventions, *attention, probes, *judge.hooks], ctx), tracer.hooks():
        for note in ctx.notes:
            writer.event("fault", note, level="warning")
        tracer.step = 0
        output = pipe(
            prompt=settings.prompt,
            negative_prompt=family.negative_prompt(settings.negative_prompt),
            num_inference_steps=settings.steps,
            guidance_scale=settings.guidance,
            width=settings.width,
            height=settings.height,
            generator=torch.Generator(device="cpu").manual_seed(settings.seed),
            output_type="np",
            **observe,
            **family.call_kwargs,
        )
        tracer.step = None
        commit_rows()  # the decode phase
    image = np.asarray(output.images[0], dtype=np.float32)
    verdict = judge.verdict(image, settings.prompt, writer)
    judge.save(writer)
    saved = writer.save_image("final", image)
    writer.submit(lambda w: w.set_verdict(verdict, detector.first))
    elapsed = time.perf_counter() - started
    writer.event("run", f"verdict {verdict['label']}", level="info" if verdict["label"] == "ok" else "warning")
    writer.finish("done", elapsed)
    writer.check()  # a write that failed at the end (the verdict, the image) fails the run, as the record says
    writer.release(emit)
    summary = _summary(writer.path, settings, verdict, detector.first, saved.result(), elapsed)
    emit({"event": "finished", **summary})
    return summary


PROMPT_CACHE_SIZE = 16


def _record_prompt(pipe: Any, prompt: str, writer: BufferedWriter, cache: dict[str, Any] | None = None) -> None:
    """Token ids, token strings and embeddings of the prompt, before any fault touches the text encoder.
    `cache` (a pipeline loaded from disk): prompts encoded by earlier runs, the last PROMPT_CACHE_SIZE."""
    if getattr(pipe, "tokenizer", None) is None or getattr(pipe, "text_encoder", None) is None:
        return
    if cache is not None and prompt in cache:
        tokens, embeddings = cache[prompt]
    else:
        with torch.inference_mode():
            tokens = prompt_tokens(pipe, prompt)
            embeddings = prompt_embeddings(pipe, prompt)
        if cache is not None:
            while len(cache) >= PROMPT_CACHE_SIZE:
                cache.pop(next(iter(cache)))
            cache[prompt] = (tokens, embeddings)
    writer.save_tensors("prompt", {"ids": np.asarray(tokens["ids"], np.int64), **embeddings})
    writer.event("prompt", f"{len(tokens['ids'])} tokens: {' '.join(tokens.get('labels', tokens['tokens']))}", **tokens)


def _summary(
    run_dir: Path, settings: RunSpec, verdict: dict | None, anomaly: dict | None, image: Path | None, elapsed: float
) -> dict[str, Any]:
    return {
        "run_dir": str(run_dir),
        "prompt": settings.prompt,
        "seed": settings.seed,
        "steps": settings.steps,
        "verdict": verdict,
        "first_anomaly": anomaly,
        "image": str(image) if image else None,
        "elapsed_s": round(elapsed, 4),
    }

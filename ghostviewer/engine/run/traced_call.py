"""The traced pipeline call of a record (recorder.py's record_call opens the record and handles every way it ends):
the family's conventions, the step callback that commits each denoising step with its latents, x0, previews,
feature and attention maps and memory, the probes and hooks put on for the call, and the judged end — verdicts,
per-sample anomalies, the final images, the summary."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ghostviewer.analysis.anomaly import AnomalyDetector
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.interventions.attention_capture import (
    DENOISER_PATTERNS,
    AttentionCapture,
    AttentionCaptureConfig,
)
from ghostviewer.engine.interventions.base import RunContext, applied
from ghostviewer.engine.interventions.probes import PipelineProbes
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR, LoadedPipeline
from ghostviewer.engine.run.judge import RunJudge
from ghostviewer.engine.run.record_buffer import BufferedWriter
from ghostviewer.engine.run.recorder_types import PipelineCall, ProbeHandlers, ProgressFn, RecordOptions, RunCancelled
from ghostviewer.engine.run.run_summary import SAMPLE_NONFINITE, run_summary, sample_table, samples_of, worst_verdict
from ghostviewer.engine.tracing.memory import read_memory, reset_peak
from ghostviewer.engine.tracing.preview import LatentPreview
from ghostviewer.engine.tracing.tracer import Tracer
from ghostviewer.record import StepInfo
from ghostviewer.spec import RunSpec


def _host(tensor: torch.Tensor, every: bool = False) -> np.ndarray:
    """A host copy of the first batch item, or of the whole batch (`every`); a copy: the pipeline may reuse the
    tensor's memory. A float32 CPU tensor is copied by numpy (a third of torch's cost)."""
    x = tensor.detach() if every else tensor.detach()[0]
    if x.dtype is torch.float32 and x.is_cpu and not x.is_neg() and type(x) is torch.Tensor:
        with contextlib.suppress(TypeError, RuntimeError):
            return x.numpy().copy()
    return x.to("cpu", torch.float32, copy=True).numpy()


def _pipeline_folder(loaded: LoadedPipeline) -> Path | None:
    if loaded.source_kind == "demo":
        return DEMO_PIPELINE_DIR
    return Path(loaded.source) if loaded.source_kind == "folder" else None


def traced_call(
    loaded: LoadedPipeline,
    settings: RunSpec,
    call: PipelineCall,
    interventions: Sequence[Any],
    writer: BufferedWriter,
    tracer: Tracer,
    detector: AnomalyDetector,
    commit_rows: Callable[[], tuple[Future[Any], dict[str, np.ndarray]]],
    started: float,
    options: RecordOptions,
    emit: ProgressFn,
    judge: RunJudge,
    late_events: Callable[[], None],
    settle: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """The traced pipeline call itself; every exit path of the record is handled by the caller."""
    pipe = loaded.pipe
    tensors_every, cancel = max(1, int(options.tensors_every)), options.cancel
    family = adapter_for(pipe)  # the family's conventions: packed latents, step callback, call keywords
    height, width = int(settings.height or 0), int(settings.width or 0)
    tracer.latent_hw = family.latent_hw(pipe, height, width)
    attention = (
        [AttentionCapture(AttentionCaptureConfig(patterns=DENOISER_PATTERNS))]
        if settings.capture_attention and options.probe else []
    )
    for capture in attention:
        capture.fallback_hw = tracer.latent_hw

    def unpacked(latents: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) whatever the pipeline keeps
        return family.unpack_latents(pipe, latents, height, width)

    def write_due() -> None:  # from a tracer hook, in the middle of a step or of the decode
        writer.release(emit)
        tracer.deadline = writer.due_at()

    def last_step() -> int:  # the pipeline's own count where it keeps one (img2img's strength, timesteps=…)
        total = getattr(pipe, "_num_timesteps", None)
        return (total if isinstance(total, int) and total > 0 else settings.steps) - 1

    tracer.on_deadline = write_due
    writer.after(lambda: {"event": "started", "run_dir": str(writer.path), "steps": settings.steps})
    call.record_prompt(writer)
    preview = LatentPreview.for_pipeline(pipe, _pipeline_folder(loaded))
    state: dict[str, Any] = {"x0": None, "mark": time.perf_counter(), "mem": read_memory(loaded.device),
                             "initial": False}

    def on_initial(latents: torch.Tensor) -> None:
        state["initial"] = True
        commit_rows()  # the encode phase, and the initial latents' own stats
        noise = {"latents": _host(unpacked(latents))}
        # A batch: every sample's, so any one image can be re-made alone (latents=…; measured on the demo: within
        # 1e-6 of the batch's, a batch of one sums in another order).
        if call.samples:
            noise["samples"] = unpacked(latents).detach().to("cpu", torch.float32, copy=True).numpy()
        writer.save_tensors("initial_noise", noise)
        writer.release(emit, now=True)  # the record is on disk from here: the encode phase and the first latents
        tracer.deadline = writer.due_at()
        state["mark"] = time.perf_counter()
        reset_peak(loaded.device)

    def on_x0(x0: torch.Tensor) -> None:
        state["x0"] = x0

    def on_step_end(_pipe: Any, index: int, timestep: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        first, maps = commit_rows()
        final = index == last_step()
        keep = index % tensors_every == 0 or final
        host: dict[str, np.ndarray] = {}
        if keep and isinstance(kwargs.get("latents"), torch.Tensor):
            step_latents = unpacked(kwargs["latents"])
            x0 = unpacked(state["x0"]) if state["x0"] is not None else None
            latents = _host(step_latents)
            host.update(latents=latents, x0=_host(x0) if x0 is not None else latents)
            if call.samples and step_latents.shape[0] == call.samples:  # a batch: every sample's too (N, C, H, W)
                host["sample_latents"] = _host(step_latents, every=True)
                host["sample_x0"] = _host(x0, every=True) if x0 is not None and x0.shape[0] == call.samples \
                    else host["sample_latents"]
        extra = {f"fm/{name}": fmap for name, fmap in maps.items()}
        for capture in attention:
            extra.update(capture.harvest())

        def tensors() -> dict[str, np.ndarray]:  # when the batch is written, from the host copies
            out = dict(host)
            if host:
                # Previews go into the step's safetensors as uint8 RGB: a PNG per step costs more than the step.
                out.update(preview=preview(host["x0"]), latents_preview=preview(host["latents"]))
            if "sample_x0" in host:  # a batch: each sample's previews too, (N, H, W, 3)
                out.update(sample_preview=np.stack([preview(x) for x in host["sample_x0"]]),
                           sample_latents_preview=np.stack([preview(x) for x in host["sample_latents"]]))
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
        total = last_step() + 1  # the steps the call makes (img2img: int(steps × strength)), for progress bars
        writer.after(lambda: {"event": "step", "run_dir": str(writer.path), "step": index, "steps": total,
                              "first_anomaly": first.result()})
        writer.release(emit, now=final)  # the decode that follows never holds steps back
        writer.check()  # a record that cannot be written fails the run now
        tracer.deadline = writer.due_at()
        state["mark"] = time.perf_counter()  # after the batch: writing it is not the next step's time
        tracer.step = index + 1
        if cancel is not None and cancel.is_cancelled():
            raise RunCancelled()
        return {}

    ctx = RunContext(
        pipe=pipe,
        prompt=call.prompts[0] if call.prompts else "",
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

    # A watched caller's own step callback is chained before ours (watch/call_io.chain_callbacks), which records
    # the latents it hands back with this.
    on_step_end.record_tensor = tracer.record  # type: ignore[attr-defined]
    observe: dict[str, Any] = (
        {"callback_on_step_end": on_step_end, "callback_on_step_end_tensor_inputs": ["latents"]} if callback else {}
    )
    on_step = None if callback else on_scheduler_step
    shared: AbstractContextManager[Any] = contextlib.nullcontext()
    if options.join_probes is not None:  # a watched pipeline's probes, shared with any call overlapping this one
        shared = options.join_probes(ProbeHandlers(call.thread if call.thread is not None else threading.get_ident(),
                                                   on_initial, on_x0, on_step, tracer.record))
        hooked = [*interventions, *(attention if options.probe else []), *judge.hooks]
    else:
        probes = PipelineProbes(on_x0=on_x0, on_initial=on_initial, on_step=on_step, thread=call.thread)
        # The tracer's hooks go on last, so it records what each module hands on: after faults, the user's own
        # hooks and bypasses (bypass.py) have had their say.
        hooked = [*interventions, *attention, probes, *judge.hooks] if options.probe else list(interventions)
    mode = torch.inference_mode() if call.inference else contextlib.nullcontext()
    with mode, shared, applied(hooked, ctx), tracer.hooks():
        for note in ctx.notes:
            writer.event("fault", note, level="warning")
        tracer.step = 0
        output = call.output = call.invoke(observe)
        tracer.step = None
        commit_rows()  # the decode phase
    settle()
    images = [np.asarray(image, dtype=np.float32) for image in call.images(output)]
    prompts = list(call.prompts) or [""]
    per_image = prompts if len(prompts) == len(images) else [prompts[0]] * len(images)
    verdicts = [judge.verdict(image, prompt, writer) for image, prompt in zip(images, per_image, strict=True)]
    verdict = worst_verdict(verdicts) or call.no_image_verdict(output)
    samples = tracer.sample_report(len(images))

    def name_samples(_writer: Any = None) -> None:
        first = detector.first
        if first is not None and len(images) > 1:
            bad = samples_of(first, tracer, verdicts)
            if bad:
                first["samples"] = bad  # every sample bad there; `sample` when only one is
                if len(bad) == 1:
                    first["sample"] = bad[0]

    # The decode's rows reach the detector when the writer carries out its queue (a held record's were judged by
    # settle()): an anomaly first seen in the decode is known only then.
    if options.discard is not None:
        name_samples()
    else:
        writer.submit(name_samples)
    if tracer.sample_rows:
        writer.save_tensors(SAMPLE_NONFINITE, sample_table(tracer.sample_rows))
    for index, anomaly in enumerate(samples):
        if anomaly is not None:
            writer.event("sample", f"image {index + 1} of {len(images)}: {anomaly['kind']} first at "
                         f"{anomaly['module']} ({anomaly['phase']}, step {anomaly['step']})", level="warning",
                         sample=index, anomaly=anomaly)
    judge.save(writer)
    saved = [writer.save_image("final" if i == 0 else f"final_{i}", image) for i, image in enumerate(images)]
    writer.submit(lambda w: w.set_verdict(verdict, detector.first, detector.first_warning))
    if len(images) > 1:
        writer.submit(lambda w: w.set_samples(verdicts, samples))
    late_events()
    elapsed = time.perf_counter() - started
    if options.discard is not None and writer.hold:
        summary = run_summary(None, settings, verdict, detector.first, [], verdicts, elapsed, detector.first_warning)
        summary["baseline"] = judge.described
        if len(images) > 1:
            summary["sample_anomalies"] = samples
        if options.discard(summary):
            writer.discard()
            return summary
    writer.event("run", f"verdict {verdict['label']}", level="info" if verdict["label"] == "ok" else "warning")
    writer.finish("done", elapsed)
    writer.check()  # a write that failed at the end (the verdict, the image) fails the run, as the record says
    writer.release(emit)
    paths = [future.result() for future in saved]
    summary = run_summary(writer.path, settings, verdict, detector.first, paths, verdicts, elapsed,
                          detector.first_warning)
    summary["baseline"] = judge.described  # what the silent checks compared against (None: nothing)
    if len(images) > 1:
        summary["sample_anomalies"] = samples
    emit({"event": "finished", **summary})
    return summary

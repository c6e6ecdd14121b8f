"""The one recorder: traces and records a pipeline call, whoever builds it — GhostViewer from a RunSpec (runner.py)
or the user's own code while a watcher is attached (engine/watch/).

Encode-phase stats are committed when the initial latents are drawn, each denoising step is committed from
`callback_on_step_end` (from `scheduler.step` for pipelines without it, such as PixArt), the decode phase after
the pipeline returns; the final images are written even when they are black or NaN. Cancellation raises from the
step callback, so the run stops at once and is marked cancelled.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ghostviewer.analysis.anomaly import AnomalyDetector
from ghostviewer.analysis.baseline_match import BaselineChoice
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.interventions.attention_capture import (
    DENOISER_PATTERNS,
    AttentionCapture,
    AttentionCaptureConfig,
)
from ghostviewer.engine.interventions.base import RunContext, applied
from ghostviewer.engine.interventions.bypass import Bypass
from ghostviewer.engine.interventions.probes import PipelineProbes
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR, LoadedPipeline, describe_source
from ghostviewer.engine.run.environment import describe_environment
from ghostviewer.engine.run.judge import RunJudge
from ghostviewer.engine.run.latent_sigma import latent_sigma
from ghostviewer.engine.run.record_buffer import BufferedWriter
from ghostviewer.engine.tracing.memory import read_memory, reset_peak
from ghostviewer.engine.tracing.preview import LatentPreview
from ghostviewer.engine.tracing.tracer import TraceConfig, Tracer
from ghostviewer.record import RunWriter, StepInfo
from ghostviewer.record.disk import DiskFull, disk_full_in
from ghostviewer.record.types import NO_FINGERPRINTS
from ghostviewer.spec import RunSpec

ProgressFn = Callable[[dict[str, Any]], None]
Event = tuple[str, str, str, dict[str, Any]]  # (kind, message, level, data)
# Worst first: a batch's verdict is the worst of its images'.
SEVERITY = ("nan", "blank", "noise", "saturated", "color_cast", "off_prompt", "ok")
SAMPLE_NONFINITE = "sample_nonfinite"  # a batch's per-sample NaN/Inf counts (tensors entry; see _sample_table)
_NO_BASELINE_ASKED = "no baseline: this run is not checked for drift (asked for)"  # RunJudge's note for None


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


def _no_events() -> list[Event]:
    return []


@dataclass
class PipelineCall:
    """One call of the pipeline as the recorder makes it.

    `invoke(observe)` makes the call with the recorder's own keywords merged in (`callback_on_step_end` and its
    tensor inputs, when the pipeline takes them); `images(output)` gives its final images (float HxWxC, [0, 1]).
    """

    invoke: Callable[[dict[str, Any]], Any]
    images: Callable[[Any], list[np.ndarray]]
    prompts: Sequence[str]  # the prompt each image was asked for (one for all, or one per image)
    record_prompt: Callable[[BufferedWriter], None] = lambda _writer: None
    samples: int | None = None  # images the call makes, when more than one: NaN/Inf are then counted per sample
    inference: bool = True  # inside torch.inference_mode (GhostViewer's own calls); a watched call runs as called
    thread: int | None = None  # hooks record only this thread's work (a watched pipeline may be shared)
    call_record: dict[str, Any] | None = None  # the call as made, kept beside the settings (meta `call`)
    save_inputs: Callable[[BufferedWriter], None] = lambda _writer: None  # the call's tensors and images
    late_events: Callable[[], list[Event]] = _no_events  # written before the record closes (an overlap found)
    environment: dict[str, Any] = field(default_factory=dict)  # merged into the record's environment
    output: Any = None  # the pipeline's own output, set as soon as the call returns (before it is judged)
    no_image_verdict: Callable[[Any], dict[str, Any]] = lambda _output: {
        "label": "ok", "scores": {}, "note": "the call returned no image to judge"}
    tree_signature: int | None = None  # the pipeline's module tree (tracer._tree_signature), when just taken


@dataclass(frozen=True)
class BaselineLookup:
    """A baseline lookup made already (choose_baseline's answer, kept by a watcher between calls of one
    pipeline with the same settings): the run is judged and its event log reads as if looked up now."""

    choice: BaselineChoice | None
    note: str


@dataclass(frozen=True)
class ProbeHandlers:
    """What one call hands the pipeline-level probes (interventions/probes.py) shared by a watched pipeline's calls
    in flight: each call gets its own thread's tensors."""

    thread: int
    on_initial: Callable[[torch.Tensor], None]
    on_x0: Callable[[torch.Tensor], None]
    on_step: Callable[[Any, torch.Tensor], None] | None
    record_tensor: Callable[..., None]


JoinProbes = Callable[[ProbeHandlers], AbstractContextManager[Any]]


@dataclass
class RecordOptions:
    tensors_every: int = 1
    baseline: Any = "auto"
    flight: bool = True
    fingerprints: bool = True
    cancel: CancelToken | None = None
    on_progress: ProgressFn | None = None
    # False: the module hooks only (they record the call's own thread), not the pipeline-level probes (initial
    # latents, scheduler steps, x0), channel means nor attention maps: those are another call's, in flight on another
    # thread of a watched pipeline (patches on one object must come off in the order they went on).
    probe: bool = True
    # Set (a watched pipeline): the pipeline-level probes are shared by every call in flight on it and joined
    # through this, so a call overlapping another still records its initial latents, steps and x0; the judge's
    # hooks (channel means, a ControlNet's effect) are its own thread's. Attention maps stay the `probe` call's.
    join_probes: JoinProbes | None = None
    # With flight=False: called with the run dict once the call is judged; True drops the record unwritten (a watched
    # call the keep policy does not keep). Statistics are then judged as each step ends rather than when written.
    discard: Callable[[dict[str, Any]], bool] | None = None


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


def _judge(loaded: LoadedPipeline, settings: RunSpec, runs_dir: Path, tracer: Tracer, baseline: Any) -> RunJudge:
    if not isinstance(baseline, BaselineLookup):
        return RunJudge(loaded, settings, runs_dir, tracer.modules, tracer.muted, baseline)
    # A BaselineChoice notes its own describe(), the lookup's note when one was found; none found: the lookup's.
    judge = RunJudge(loaded, settings, runs_dir, tracer.modules, tracer.muted, baseline.choice)
    if baseline.choice is None:
        judge.notes = [(level, baseline.note if note == _NO_BASELINE_ASKED else note) for level, note in judge.notes]
    return judge


def worst_verdict(verdicts: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    if not verdicts:
        return None
    rank = {label: i for i, label in enumerate(SEVERITY)}
    return min(verdicts, key=lambda v: rank.get(str(v.get("label")), 0))


def record_call(
    loaded: LoadedPipeline,
    settings: RunSpec,
    call: PipelineCall,
    runs_dir: Path,
    interventions: Sequence[Any] = (),
    notes: Sequence[str] = (),
    options: RecordOptions | None = None,
) -> dict[str, Any]:
    """Trace and record one call; return CONTRACT's `run` dict (`images`, `verdicts` one per image).

    Raises RunFailed (from the pipeline's own exception) when the call raised, GhostError for usage errors."""
    options = options or RecordOptions()
    pipe = loaded.pipe
    tracer = Tracer(pipe, TraceConfig(depth=settings.trace_depth, capture=tuple(settings.capture),  # type: ignore[arg-type]
                                      fingerprints=options.fingerprints), call.tree_signature)
    tracer.thread = call.thread
    tracer.samples = call.samples
    # A bypassed block's insides still compute, but while the bypass is active their outputs are not the
    # run's: they are not recorded, so the first anomaly never names a module inside a bypassed block.
    tracer.muted = [b.config for b in interventions if isinstance(b, Bypass)]
    environment = {**describe_environment(loaded.device), "pipeline": describe_source(loaded)}
    environment["determinism"] = {**environment.get("determinism", {}), "generator_device": settings.generator_device}
    environment.update(call.environment)
    # what makes a headroom note on the latents benign (nested: a consequence of the scheduler, not an environment)
    environment["latents"] = {"init_noise_sigma": latent_sigma(pipe)}
    if not options.fingerprints:
        environment["fingerprint"] = NO_FINGERPRINTS
    # The record is written in batches between steps (record_buffer.py); events are emitted here, each once its
    # writes are committed.
    writer = BufferedWriter(
        lambda: RunWriter.create(Path(runs_dir), settings.to_dict(), environment, call=call.call_record),
        hold=not options.flight,
    )
    emit = options.on_progress or (lambda _event: None)
    judge = _judge(loaded, settings, runs_dir, tracer, options.baseline)
    for hook in judge.hooks:  # channel means, a ControlNet's effect: this call's own thread's outputs
        if hasattr(hook, "thread"):
            hook.thread = call.thread
    detector = judge.detector()
    detector.latent_sigma = environment["latents"]["init_noise_sigma"]
    started = time.perf_counter()

    unjudged: list[tuple[Any, Future[Any]]] = []

    def settle() -> None:
        """The batches a droppable record holds, judged together (in a batch the harvest runs warm) and queued."""
        for batch, first in unjudged:
            columns = Tracer.harvest(batch).columns
            detector.feed_columns(columns)
            writer.submit(lambda w, c=columns: w.add_stats(c))
            first.set_result(detector.first)
        unjudged.clear()

    def commit_rows() -> tuple[Future[Any], dict[str, np.ndarray]]:
        """Queue what the hooks queued for the next batch, which turns it into columns, feeds the anomaly detector
        and stores them; returns (the first anomaly once done, the feature maps)."""
        batch = tracer.take()
        if options.discard is not None:  # judged at the end by settle(), before anything is written (or not)
            first: Future[Any] = Future()
            unjudged.append((batch, first))
            return first, batch.feature_maps

        def store(w: RunWriter) -> dict[str, Any] | None:
            columns = Tracer.harvest(batch).columns
            detector.feed_columns(columns)
            w.add_stats(columns)
            return detector.first

        return writer.submit(store), batch.feature_maps

    def late_events() -> None:
        try:
            for kind, message, level, data in call.late_events():
                writer.event(kind, message, level=level, **data)
        except Exception:  # noqa: BLE001 - a finding that cannot be written must not lose the record
            pass

    def end(status: str, message: str, level: str, error: str | None = None) -> None:
        """Close the record whatever happened: pending rows, the first anomaly so far, the status."""
        try:
            commit_rows()
            settle()
        except Exception:  # noqa: BLE001 - the rows of a broken step are the least of it; close the record
            pass
        late_events()
        writer.event("run", message, level=level)
        writer.submit(lambda w: w.set_verdict(None, detector.first, detector.first_warning))  # fed as batches go
        try:
            writer.finish(status, time.perf_counter() - started, error=error)
        except Exception:  # noqa: BLE001 - the record cannot take its status (it is closed, and reads interrupted)
            pass  # the run's own error is what is reported
        writer.release(emit)  # the events of the steps committed before the end

    try:
        for note in notes:
            writer.event("settings", note)
        judge.log(writer)
        call.save_inputs(writer)
        return _record(
            loaded, settings, call, interventions, writer, tracer, detector, commit_rows, started, options, emit,
            judge, late_events, settle,
        )
    except RunCancelled:
        end("cancelled", "cancelled by the user", "warning")
        emit({"event": "cancelled", "run_dir": str(writer.path), "first_anomaly": detector.first})
        return {
            **_summary(writer.path, settings, None, detector.first, [], [], time.perf_counter() - started),
            "status": "cancelled",
        }
    except GhostError as exc:
        writer.raise_if_not_created()
        end("failed", str(exc), "error", error=str(exc))
        emit({"event": "failed", "run_dir": str(writer.path), "error": str(exc), "first_anomaly": detector.first})
        raise
    except Exception as exc:  # the pipeline (or an intervention) broke: keep the record, report it
        writer.raise_if_not_created()  # no record at all (e.g. an unwritable runs folder): that error, as before
        full = disk_full_in(exc)  # the disk, not the pipeline: no loop may count it as a failed run
        message = str(full) if full is not None else f"{type(exc).__name__}: {exc}"
        end("failed", message, "error", error=message)
        emit({"event": "failed", "run_dir": str(writer.path), "error": message, "first_anomaly": detector.first})
        if full is not None:
            raise DiskFull(f"{full}; the partial run is in {writer.path}") from exc
        raise RunFailed(message, writer.path) from exc
    except BaseException:  # KeyboardInterrupt, SystemExit: the record is closed before the process goes
        end("cancelled", "interrupted", "warning", error="interrupted")
        raise
    finally:
        if not writer.finished:  # a bug in the code above must still leave a closed record
            writer.finish("failed", time.perf_counter() - started, error="the run ended unexpectedly")


def _record(
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
    first = detector.first
    if first is not None and len(images) > 1:
        bad = _samples_of(first, tracer, verdicts)
        if bad:
            first["samples"] = bad  # every sample bad there; `sample` when only one is
            if len(bad) == 1:
                first["sample"] = bad[0]
    if tracer.sample_rows:
        writer.save_tensors(SAMPLE_NONFINITE, _sample_table(tracer.sample_rows))
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
        summary = _summary(None, settings, verdict, detector.first, [], verdicts, elapsed, detector.first_warning)
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
    summary = _summary(writer.path, settings, verdict, detector.first, paths, verdicts, elapsed, detector.first_warning)
    summary["baseline"] = judge.described  # what the silent checks compared against (None: nothing)
    if len(images) > 1:
        summary["sample_anomalies"] = samples
    emit({"event": "finished", **summary})
    return summary


def _samples_of(first: dict[str, Any], tracer: Tracer, verdicts: list[dict[str, Any]]) -> list[int]:
    """The batch indices the first anomaly lies in: from the per-sample NaN/Inf counts of its output (CPU), else —
    statistics finished on an accelerator — from the images, when one only is NaN. [] when unknown."""
    if first.get("kind") not in ("nan", "inf"):
        return []
    where = (first.get("module"), first.get("phase"), first.get("step"))
    for _seq, module, phase, step, _call, nans, infs in tracer.sample_rows:  # execution order, as the detector's
        if (module, phase, step) == where:
            return [i for i, (a, b) in enumerate(zip(nans, infs, strict=True)) if a or b]
    counts = tracer.first_nonfinite
    if counts is not None and counts[0] == (first["module"], first["step"]):
        return [i for i, n in enumerate(counts[1]) if n]
    nan = [i for i, v in enumerate(verdicts) if v.get("label") == "nan"]
    return nan if len(nan) == 1 and counts is None else []


def _sample_table(rows: Sequence[tuple[int, str, str, int | None, int, list[int], list[int]]]) -> dict[str, np.ndarray]:
    """The per-sample NaN/Inf counts as a record's tensors: `seq` (K,) — the statistics row each line belongs to,
    which names its module, phase, step and call —, `nan` and `inf` (K, N), one column per sample."""
    return {"seq": np.asarray([r[0] for r in rows], dtype=np.int64),
            "nan": np.asarray([r[5] for r in rows], dtype=np.int64),
            "inf": np.asarray([r[6] for r in rows], dtype=np.int64)}


def _summary(
    run_dir: Path | None, settings: RunSpec, verdict: dict | None, anomaly: dict | None, images: list[Path],
    verdicts: list[dict[str, Any]], elapsed: float, warning: dict | None = None,
) -> dict[str, Any]:
    return {
        "run_dir": str(run_dir) if run_dir else None,
        "prompt": settings.prompt,
        "seed": settings.seed,
        "steps": settings.steps,
        "verdict": verdict,
        "first_anomaly": anomaly,
        "first_warning": warning,  # the first benign warning (analysis/anomaly.py), never renamed first_anomaly
        "image": str(images[0]) if images else None,
        "elapsed_s": round(elapsed, 4),
        "images": [str(p) for p in images],
        "verdicts": verdicts,
    }

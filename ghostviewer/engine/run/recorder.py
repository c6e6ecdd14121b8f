"""The one recorder: traces and records a pipeline call, whoever builds it — GhostViewer from a RunSpec (runner.py)
or the user's own code while a watcher is attached (engine/watch/).

Encode-phase stats are committed when the initial latents are drawn, each denoising step is committed from
`callback_on_step_end` (from `scheduler.step` for pipelines without it, such as PixArt), the decode phase after
the pipeline returns; the final images are written even when they are black or NaN. Cancellation raises from the
step callback, so the run stops at once and is marked cancelled.

This file opens the record and ends it whichever way the call ends; the traced call itself is traced_call.py, what a
call is given recorder_types.py, its verdict and summary run_summary.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.interventions.bypass import Bypass
from ghostviewer.engine.loading.pipelines import LoadedPipeline, describe_source
from ghostviewer.engine.run.environment import describe_environment
from ghostviewer.engine.run.judge import RunJudge
from ghostviewer.engine.run.latent_sigma import latent_sigma
from ghostviewer.engine.run.record_buffer import BufferedWriter
from ghostviewer.engine.run.recorder_types import (
    BaselineLookup,
    CancelToken,
    Event,
    JoinProbes,
    PipelineCall,
    ProbeHandlers,
    ProgressFn,
    RecordOptions,
    RunCancelled,
    RunFailed,
)
from ghostviewer.engine.run.run_summary import SAMPLE_NONFINITE, SEVERITY, run_summary, worst_verdict
from ghostviewer.engine.run.traced_call import traced_call
from ghostviewer.engine.tracing.blocks import tree_signature
from ghostviewer.engine.tracing.tracer import TraceConfig, Tracer
from ghostviewer.record import RunWriter
from ghostviewer.record.disk import DiskFull, disk_full_in
from ghostviewer.record.types import NO_FINGERPRINTS
from ghostviewer.spec import RunSpec

# The types (recorder_types.py) and the summary's names (run_summary.py) stay importable from here.
__all__ = [
    "SAMPLE_NONFINITE",
    "SEVERITY",
    "BaselineLookup",
    "CancelToken",
    "Event",
    "JoinProbes",
    "PipelineCall",
    "ProbeHandlers",
    "ProgressFn",
    "RecordOptions",
    "RunCancelled",
    "RunFailed",
    "record_call",
    "worst_verdict",
]

_NO_BASELINE_ASKED = "no baseline: this run is not checked for drift (asked for)"  # RunJudge's note for None


def _judge(loaded: LoadedPipeline, settings: RunSpec, runs_dir: Path, tracer: Tracer, baseline: Any,
           signature: int) -> RunJudge:
    if not isinstance(baseline, BaselineLookup):
        return RunJudge(loaded, settings, runs_dir, tracer.modules, tracer.muted, baseline, signature, tracer.sentinels)
    # A BaselineChoice notes its own describe(), the lookup's note when one was found; none found: the lookup's.
    judge = RunJudge(loaded, settings, runs_dir, tracer.modules, tracer.muted, baseline.choice, signature,
                     tracer.sentinels)
    if baseline.choice is None:
        judge.notes = [(level, baseline.note if note == _NO_BASELINE_ASKED else note) for level, note in judge.notes]
    return judge


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
    # once a call: the tracer's module list and the weight audit's cache check share it
    signature = call.tree_signature if call.tree_signature is not None else tree_signature(pipe)
    tracer = Tracer(pipe, TraceConfig(depth=settings.trace_depth, capture=tuple(settings.capture),  # type: ignore[arg-type]
                                      fingerprints=options.fingerprints), signature)
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
    judge = _judge(loaded, settings, runs_dir, tracer, options.baseline, signature)
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
        return traced_call(
            loaded, settings, call, interventions, writer, tracer, detector, commit_rows, started, options, emit,
            judge, late_events, settle,
        )
    except RunCancelled:
        end("cancelled", "cancelled by the user", "warning")
        emit({"event": "cancelled", "run_dir": str(writer.path), "first_anomaly": detector.first})
        return {
            **run_summary(writer.path, settings, None, detector.first, [], [], time.perf_counter() - started),
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

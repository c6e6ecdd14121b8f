"""The watcher: every call of a watched pipeline, whoever makes it, traced, judged and recorded by the one recorder
(engine/run/recorder.py), and the caller's own output handed back unchanged.

The instance is watched, not its class: its `__class__` becomes a subclass made for this watcher whose `__call__`
records the call, and `detach()` puts the class back. A failure of GhostViewer's own (a folder it cannot write)
never breaks the caller's call: it is logged and the call made as if unwatched; the pipeline's own exception reaches
the caller as it was raised.

Threads: a call made while another is in flight on another thread is recorded too, and the overlap is written into
both records as a finding. Each call's module hooks and channel means record its own thread's work only; the
pipeline-level probes (initial latents, scheduler steps, x0) are shared by the calls in flight (shared_probes.py), each
handed its own thread's tensors, so an overlapping call's record is as complete as a lone call's.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import shutil
import sys
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.memory_identity import folder_of
from ghostviewer.engine.loops.recorded import wrap_pipeline
from ghostviewer.engine.run.applied_settings import component_configs
from ghostviewer.engine.run.recorder import PipelineCall, RecordOptions, RunFailed, record_call
from ghostviewer.engine.run.runner import _record_prompt
from ghostviewer.engine.tracing.blocks import tree_walk
from ghostviewer.engine.watch.baseline_cache import BaselineCache
from ghostviewer.engine.watch.call_io import (
    bind_arguments,
    chain_callbacks,
    latents_of,
    output_images,
    prompts_of,
    signature_defaults,
    spec_from_call,
)
from ghostviewer.engine.watch.call_record import CALL_TENSORS, describe_call
from ghostviewer.engine.watch.keep import KeepPolicy, anomalous
from ghostviewer.engine.watch.shared_probes import SharedProbes
from ghostviewer.engine.watch.study_thread import StudyThread
from ghostviewer.paths import default_runs_dir
from ghostviewer.record import RecordError, RunRecord, StudyWriter

log = logging.getLogger(__name__)
RUNS_IN_MEMORY = 1000  # `runs` holds the last this many calls' dicts; summary() counts every call
EVICTED_NOTE = "evicted (ring or max_bytes)"
PROGRESS_EVERY_S = 1.0  # the study's progress and result are written at most this often (and at the end)
_local = threading.local()  # a watched call on this thread (a pipeline calling another inside is not a new call)


@dataclass
class _InFlight:
    index: int
    thread: threading.Thread
    overlaps: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)


class Watcher:
    """`keep`, `ring`, `max_bytes`: keep.py. `depth`: "block" | "leaf". `baseline`: as execute_run's."""

    def __init__(self, runs_dir: str | Path | None = None, keep: str | int = "all", depth: str = "block",
                 ring: int | None = None, max_bytes: int | None = None, baseline: Any = "auto") -> None:
        if depth not in ("block", "leaf"):
            raise GhostError(f"depth must be 'block' or 'leaf', not {depth!r}")
        self.policy = KeepPolicy(keep, ring, max_bytes)
        self.depth, self.baseline = depth, baseline
        self.runs_dir = Path(runs_dir) if runs_dir is not None else default_runs_dir()
        self._runs: deque[dict[str, Any]] = deque(maxlen=RUNS_IN_MEMORY)
        self._lock = threading.Lock()
        # Weak: a pipeline the program lets go of is not kept alive by being watched (watch_process in a service).
        self._pipes: list[tuple[weakref.ref[Any], type]] = []
        self._classes: dict[type, type] = {}
        self._loaded: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._prompts: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()  # per pipeline
        self._probes: weakref.WeakKeyDictionary[Any, SharedProbes] = weakref.WeakKeyDictionary()
        self._baselines = BaselineCache()
        self._in_flight: dict[int, _InFlight] = {}
        self._owner: int | None = None  # the call whose attention capture may patch the pipeline (one at a time)
        self._counts = {"calls": 0, "kept": 0, "failed": 0}
        # The study's database is written from one thread of its own (SQLite connections stay on their thread).
        self._study_thread = StudyThread()
        params = {"keep": keep, "ring": ring, "max_bytes": max_bytes, "depth": depth,
                  "program": " ".join([os.path.basename(sys.argv[0] or "python"), *sys.argv[1:]])[:400]}
        self._study: StudyWriter = self._study_thread.submit(
            lambda: StudyWriter.create(self.runs_dir, "watch", params)).result()
        self.closed = False
        atexit.register(_detach_at_exit, weakref.ref(self))  # attach() without detach(): the study still closes

    @property
    def runs(self) -> list[dict[str, Any]]:
        """One CONTRACT run dict per call, in the order the calls began (the last RUNS_IN_MEMORY of them)."""
        with self._lock:
            return sorted(self._runs, key=lambda run: run["call_index"])

    @property
    def study_dir(self) -> Path:
        return self._study.path

    # -- attaching ------------------------------------------------------------------------------------------
    def add(self, pipe: Any) -> Any:
        """Watch `pipe` (any DiffusionPipeline); returns it. A pipeline watched already is refused."""
        if self.closed:
            raise GhostError("this watcher is detached: attach a new one")
        if getattr(type(pipe), "_ghostviewer_watcher", None) is self:
            return pipe
        check_watchable(pipe)
        original = type(pipe)
        pipe.__class__ = self._watched_class(original)
        self._pipes.append((weakref.ref(pipe), original))
        return pipe

    def _watched_class(self, original: type) -> type:
        cls = self._classes.get(original)
        if cls is None:
            call = original.__call__
            watcher = self

            @functools.wraps(call)
            def __call__(pipe: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807 - the pipeline's own call
                return watcher._call(pipe, call, args, kwargs)

            cls = self._classes[original] = type(original.__name__, (original,), {
                "__call__": __call__, "__module__": original.__module__, "__qualname__": original.__qualname__,
                "_ghostviewer_watcher": watcher})
        return cls

    def detach(self) -> None:
        """Put every watched pipeline's class back and close the study (waiting for calls in flight is the
        caller's business: a call still running finishes its record)."""
        if self.closed:
            return
        self.closed = True
        for ref, original in reversed(self._pipes):
            pipe = ref()
            if pipe is not None and type(pipe).__dict__.get("_ghostviewer_watcher") is self:
                pipe.__class__ = original
        self._pipes.clear()
        result = {"summary": self._summary_line(), **self._counts_now()}
        self._study_thread.flush_later()  # the last progress, then the end
        self._study_thread.submit(lambda: self._study.finish("done", result=result))
        self._study_thread.stop()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.detach()

    # -- results --------------------------------------------------------------------------------------------
    def _counts_now(self) -> dict[str, Any]:
        calls, kept, failed = self._counts["calls"], self._counts["kept"], self._counts["failed"]
        return {"calls": calls, "kept": kept, "failed": failed,
                "failure_rate": round(failed / calls, 4) if calls else 0.0}

    def summary(self) -> dict[str, Any]:
        """{"calls", "kept", "failed", "failure_rate", "study_dir"}: failed counts calls with a bad verdict, an
        anomaly, or an error."""
        with self._lock:
            return {**self._counts_now(), "study_dir": str(self.study_dir)}

    def _summary_line(self, counts: dict[str, Any] | None = None) -> str:
        c = counts or self._counts_now()
        return f"{c['calls']} calls watched, {c['failed']} failed ({c['failure_rate']:.0%}), {c['kept']} kept"

    # -- one call ---------------------------------------------------------------------------------------------
    def _call(self, pipe: Any, original: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        if getattr(_local, "busy", False) or self.closed:
            return original(pipe, *args, **kwargs)
        thread = threading.current_thread()
        with self._lock:
            index = self._counts["calls"]
            self._counts["calls"] += 1
            flight = _InFlight(index, thread)
            owner = self._owner is None
            if owner:
                self._owner = index
            for other in self._in_flight.values():
                _overlap(flight, other)
                _overlap(other, flight)
            self._in_flight[index] = flight
        _local.busy = True
        try:
            return self._record(pipe, original, args, kwargs, flight, owner)
        finally:
            _local.busy = False
            with self._lock:
                del self._in_flight[index]
                if self._owner == index:
                    self._owner = None

    def _record(self, pipe: Any, original: Any, args: tuple, kwargs: dict[str, Any], flight: _InFlight,
                owner: bool) -> Any:
        made: dict[str, Any] = {}

        def invoke(observe: dict[str, Any]) -> Any:
            made["invoked"] = True
            given = chain_callbacks(kwargs, observe) if "callback_on_step_end" not in arguments or \
                "callback_on_step_end" in kwargs else kwargs  # a callback passed by position is left alone
            try:
                return original(pipe, *args, **given)
            except BaseException as exc:
                made["error"] = exc
                raise

        try:
            arguments = bind_arguments(original, pipe, args, kwargs)
            call, settings, loaded = self._prepare(pipe, original, arguments, invoke, flight, owner)
            index, policy = flight.index, self.policy
            baseline = self.baseline
            if isinstance(baseline, str) and baseline == "auto":
                baseline = self._baselines.lookup(loaded, settings, self._study.runs_dir, call.tree_signature or 0)
            with self._lock:
                shared = self._probes.get(pipe)
                if shared is None:
                    shared = self._probes[pipe] = SharedProbes(pipe)
            options = RecordOptions(baseline=baseline, flight=policy.writes_as_it_goes, probe=owner,
                                    join_probes=shared.joined,
                                    discard=(lambda summary: not policy.wants(index, summary))
                                    if policy.drops_unwritten else None)
        except Exception as exc:  # noqa: BLE001 - GhostViewer's own failure: the caller's call goes on unwatched
            log.warning("ghostviewer: call %d not recorded (%s: %s)", flight.index, type(exc).__name__, exc)
            return original(pipe, *args, **kwargs)
        started = time.perf_counter()
        error: BaseException | None = None  # the pipeline's own, raised again as it was (outside any except)
        try:
            summary = record_call(loaded, settings, call, self._study.runs_dir, options=options)
        except RunFailed as exc:
            self._finish(flight.index, _failed_summary(exc, settings, call, time.perf_counter() - started))
            error = made.get("error")
            if error is None:
                log.warning("ghostviewer: call %d made, its record failed: %s", flight.index, exc)
                return call.output  # GhostViewer's own failure after the call: the caller's output all the same
        except BaseException as exc:
            error = made.get("error")  # KeyboardInterrupt in the pipeline included
            if error is None:
                if not made.get("invoked"):
                    log.warning("ghostviewer: call %d not recorded (%s: %s)", flight.index, type(exc).__name__, exc)
                    return original(pipe, *args, **kwargs)
                log.warning("ghostviewer: call %d made, its record failed (%s: %s)", flight.index,
                            type(exc).__name__, exc)
                if call.output is None:
                    raise
                return call.output
        if error is not None:
            raise error
        summary.update(status="done", call=call.call_record)
        self._finish(flight.index, summary)
        return call.output

    def _prepare(self, pipe: Any, original: Any, arguments: dict[str, Any], invoke: Any, flight: _InFlight,
                 owner: bool) -> tuple[PipelineCall, Any, Any]:
        signature, hooked = tree_walk(pipe)  # once a call: the tracer, the call record and the baseline cache share it
        record = describe_call(pipe, arguments, flight.thread, signature, hooked)  # generator states as the call finds
        loaded = self._loaded.get(pipe)
        if loaded is None:  # once per pipeline (its weight hashes take a while): a LoRA loaded later is not seen
            loaded = wrap_pipeline(pipe)
            self._loaded[pipe] = _WeakLoaded(loaded)
        else:
            loaded = loaded.get(pipe)
        defaults = signature_defaults(original)
        output_type = arguments.get("output_type", defaults.get("output_type", "pil"))
        samples = _expected_images(arguments, defaults)
        folder = folder_of(pipe)
        settings = spec_from_call(pipe, arguments, defaults, kind=record.json["kind"], depth=self.depth,
                                  source=str(folder) if folder else loaded.source, images=samples,
                                  device=loaded.device)
        prompts = prompts_of(arguments)
        per_prompt = max(1, samples // len(prompts))
        first_prompt = prompts[0]
        if record.unrecorded:
            record.json["note"] = "unrecorded: these arguments cannot be kept; a re-issued call lacks them"

        def save_inputs(writer: Any) -> None:
            if record.tensors:
                writer.save_tensors(CALL_TENSORS, record.tensors)
            for name, image in record.images.items():
                writer.save_image(name, image)
            for name in record.unrecorded:
                writer.event("call", f"argument {name} cannot be recorded (an opaque object): a re-issued call "
                             "lacks it", level="warning", argument=name)
            if not record.generators:
                writer.event("call", "no generator: the call drew its noise from torch's global generator; it cannot "
                             "be re-issued exactly", level="warning")

        def record_prompt(writer: Any) -> None:  # the first prompt's tokens and embeddings (none for prompt_embeds)
            if isinstance(arguments.get("prompt"), (str, list, tuple)):
                _record_prompt(pipe, first_prompt, writer, self._prompts.setdefault(pipe, {}))

        call = PipelineCall(
            invoke=invoke,
            images=lambda output: output_images(output, output_type),
            prompts=[p for p in prompts for _ in range(per_prompt)] if len(prompts) * per_prompt == samples
            else prompts,
            record_prompt=record_prompt,
            samples=samples if samples > 1 else None,
            inference=False,
            thread=flight.thread.ident,
            call_record=record.json,
            save_inputs=save_inputs,
            late_events=lambda: list(flight.overlaps),
            environment={"watched": {"program": self._study_params_program(), "call": flight.index,
                                     "thread": flight.thread.name, "probed": True},
                         "component_configs": component_configs(pipe)},  # as GhostViewer's own runs record them
            no_image_verdict=_latent_verdict,
            tree_signature=signature,
        )
        return call, settings, loaded

    def _study_params_program(self) -> str:
        return os.path.basename(sys.argv[0] or "python")

    def _finish(self, index: int, summary: dict[str, Any]) -> None:
        """Apply the keep policy to a recorded call, note it in the study, count it."""
        bad = anomalous(summary)
        keep = self.policy.wants(index, summary)
        run_dir = Path(summary["run_dir"]) if summary.get("run_dir") else None
        evicted: list[Path] = []
        if run_dir is not None and not keep:  # written as it went, and not wanted after all
            shutil.rmtree(run_dir, ignore_errors=True)
        elif keep and run_dir is not None:
            evicted = self.policy.kept(run_dir, summary)
        summary.update(kept=keep and run_dir not in evicted, call_index=index)
        if not summary["kept"]:
            summary.update(run_dir=None, image=None, images=[])
        evicted_dirs = [str(p) for p in evicted if p != run_dir]
        with self._lock:
            self._counts["kept"] += bool(summary["kept"])
            self._counts["failed"] += bool(bad)
            for earlier in self._runs if evicted_dirs else ():  # kept before, deleted now by the ring or max_bytes
                if earlier.get("run_dir") in evicted_dirs:
                    earlier.update(kept=False, run_dir=None, image=None, images=[], evicted=True)
                    self._counts["kept"] -= 1
            self._runs.append(summary)
            counts = self._counts_now()
        stored = run_dir if run_dir is not None else self._study.runs_dir / f"call-{index:06d}"
        role = "member" if summary["kept"] else "summary"
        note = "" if summary["kept"] else (EVICTED_NOTE if keep else "not kept (healthy)")
        row = {k: summary.get(k) for k in ("status", "verdict", "first_anomaly")}

        line = self._summary_line(counts)

        def write() -> None:
            try:
                self._study.add_run(stored, {"call": index}, role=role, summary=row, note=note)
                for path in evicted_dirs:
                    self._study.demote(path, EVICTED_NOTE)
                    self._study.event("evicted", f"record deleted to honour ring/max_bytes: {path}", run_dir=path)
            except (RecordError, OSError, ValueError) as exc:
                log.warning("ghostviewer: the watch study could not take call %d: %s", index, exc)

        def progress() -> None:  # the newest counts only: calls in quick succession share one write
            try:
                self._study.set_progress(counts["calls"])
                self._study.set_result({"summary": line, **counts})
            except (RecordError, OSError, ValueError) as exc:
                log.warning("ghostviewer: the watch study could not take its progress: %s", exc)

        with contextlib.suppress(RuntimeError):  # a call finishing after detach: counted, not written
            self._study_thread.submit(write)
            self._study_thread.later(progress, PROGRESS_EVERY_S)


class _WeakLoaded:
    """A LoadedPipeline kept without its pipeline (a value of a WeakKeyDictionary must not hold its key)."""

    def __init__(self, loaded: Any) -> None:
        self._fields = {name: getattr(loaded, name) for name in loaded.__dataclass_fields__ if name != "pipe"}
        self._cls = type(loaded)

    def get(self, pipe: Any) -> Any:
        return self._cls(pipe=pipe, **self._fields)


def _detach_at_exit(ref: weakref.ref[Watcher]) -> None:
    watcher = ref()
    if watcher is not None:
        with contextlib.suppress(Exception):
            watcher.detach()


def check_watchable(pipe: Any) -> None:
    """GhostError unless `pipe` is a diffusers pipeline no other watcher watches."""
    if not isinstance(getattr(pipe, "components", None), dict) or not callable(pipe):
        raise GhostError(f"ghostviewer.watch takes a diffusers pipeline, not {type(pipe).__name__}")
    if getattr(type(pipe), "_ghostviewer_watcher", None) is not None:
        raise GhostError("this pipeline is already watched (detach the other watcher first)")


def _overlap(this: _InFlight, other: _InFlight) -> None:
    this.overlaps.append((
        "concurrency",
        f"call {this.index} overlapped call {other.index} (thread {other.thread.name}) on the same pipeline object: "
        "they share its scheduler and modules, so their steps may have mixed",
        "warning",
        {"call": other.index, "thread": other.thread.name},
    ))


def _expected_images(arguments: dict[str, Any], defaults: dict[str, Any]) -> int:
    prompt = arguments.get("prompt")
    if isinstance(prompt, (list, tuple)):
        prompts = len(prompt)
    elif isinstance(arguments.get("prompt_embeds"), torch.Tensor):
        prompts = int(arguments["prompt_embeds"].shape[0])
    else:
        prompts = 1
    per = arguments.get("num_images_per_prompt", defaults.get("num_images_per_prompt", 1))
    return max(1, prompts * (int(per) if isinstance(per, int) and per > 0 else 1))


def _latent_verdict(output: Any) -> dict[str, Any]:
    latents = latents_of(output)
    bad = latents is not None and not bool(torch.isfinite(latents).all())
    return {"label": "nan" if bad else "ok", "scores": {},
            "note": "output_type latent: no image to judge; the verdict is the latents' finiteness"}


def _failed_summary(exc: RunFailed, settings: Any, call: PipelineCall, elapsed: float) -> dict[str, Any]:
    anomaly = None
    with contextlib.suppress(RecordError, OSError):
        anomaly = RunRecord(exc.run_dir).first_anomaly
    return {"run_dir": str(exc.run_dir), "prompt": settings.prompt, "seed": settings.seed, "steps": settings.steps,
            "verdict": None, "first_anomaly": anomaly, "image": None, "elapsed_s": round(elapsed, 4), "images": [],
            "verdicts": [], "status": "failed", "error": str(exc), "call": call.call_record}



"""The engine process: the one long-lived process that owns torch, driven by the GUI over a pipe.

`python -m ghostviewer.engine.server` reads one JSON command per line on stdin and writes one JSON event per
line on stdout; bulk data (tensors, images) goes through the run record on disk, never over the pipe.

Commands (an optional "id" is echoed in every event the command causes):
  {"cmd": "load", "source": "demo", "device": "auto", "dtype": null, "allow_pickle": false}
  {"cmd": "run", "settings": {...RunSpec...}, "runs_dir": "..."}   "replay_of": RUN_DIR: a re-run of that run — a
      watched call re-issued as it was made, GhostViewer's own call with its input images from the record
  {"cmd": "cancel", "run": ID}                    at once, even mid-run; "run": that run command's id
  {"cmd": "decode", "run_dir": "...", "step": 3, "tensor": "latents"|"x0", "sample": 0}   sample: a batch's
      image (0-based, default 0: the first, what a client that does not send it means)
  {"cmd": "blocks"}
  {"cmd": "sweep", "list": PATH, "seeds": "0-9", "settings": {...}, "runs_dir": "...", "outside_files": bool}
  {"cmd": "bisect", "run_dir": "...", "runs_dir": "..."}   bisect_progress…, bisect_finished (cancel like a run)
  {"cmd": "isolate", "run_dir": "...", "module": "unet.mid_block", "step": 0, "out": DIR, "fuzz": true}
  {"cmd": "export", "run_dirs": [...], "out": ZIP, "include_tensors": true, "include_feature_maps": true}
      a bundle with each run's first bad module's inputs: export_progress…, then exported or export_failed
  {"cmd": "judge_against", "run_dir": "...", "reference": SRC | "baseline": FILE, "runs_dir": "..."}
      the shown run beside a known-good pipeline (reference_finished: its first departure) or made again and
      judged by a chosen baseline file (judged: the new run's dict with its verdict and `baseline`)
  {"cmd": "probe", "runs_dir": "...", "steps": 10, "prompt": null, "probes": null}   the loaded pipeline's probe
      battery (a `probe` study; "probes": some of them): probe_progress…, then probe_finished {"result": the report}
  {"cmd": "quit"}                                  cancels the running job; what is queued behind it never starts
Events: ready, loaded, started, step, finished, cancelled, failed, decoded, blocks, isolated, exported,
export_failed, error (one-line message).

Torch work happens on the main thread, one command at a time; a reader thread takes stdin so `cancel` and
`quit` arrive while a run is going. Library chatter on stdout is redirected to stderr, which the GUI logs.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import IO, Any

PROTOCOL_VERSION = 1
_QUIT = {"cmd": "quit"}


class Emitter:
    """Writes events as JSON lines to the protocol stream; safe to call from any thread."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}, default=str)
        with self._lock:
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the GUI went away; the reader thread sees EOF and quits


def protocol_stream() -> IO[str]:
    """Keep the real stdout for the protocol and point fd 1 (and sys.stdout) at stderr for everything else."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", encoding="utf-8", buffering=1)


def engine_threads() -> int:
    """Torch threads: GHOSTVIEWER_ENGINE_THREADS, else all cores but one (the GUI keeps a core to redraw)."""
    wanted = os.environ.get("GHOSTVIEWER_ENGINE_THREADS", "")
    if wanted.isdigit() and int(wanted) > 0:
        return int(wanted)
    return max(1, (os.cpu_count() or 2) - 1)


def read_commands(stream: IO[str], commands: queue.Queue[dict[str, Any]], session: Any, emit: Emitter) -> None:
    """The reader thread: parse lines, handle `cancel` at once, queue the rest; EOF means quit."""
    while True:
        line = stream.readline()
        if not line:
            session.stopping = True
            session.cancel()
            commands.put(dict(_QUIT))
            return
        if not line.strip():
            continue
        try:
            command = json.loads(line)
            if not isinstance(command, dict) or not isinstance(command.get("cmd"), str):
                raise ValueError("a command is a JSON object with a 'cmd' string")
        except ValueError as exc:
            emit("error", message=f"bad command line: {exc}", cmd=None)
            continue
        if command["cmd"] == "cancel":
            session.cancel(command.get("run"))
            continue
        if command["cmd"] == "quit":
            session.stopping = True  # what is still queued is not started (serve)
            session.cancel()
        commands.put(command)
        if command["cmd"] == "quit":
            return


class EngineSession:
    """The engine's state (the loaded pipeline, the running run's cancel token) and its command handlers."""

    def __init__(self, emit: Emitter) -> None:
        self.emit = emit
        self.loaded: Any = None
        self._token: Any = None
        self._run_id: Any = None  # the id of the run command being executed
        self._cancelled_early: set[Any] = set()  # run ids cancelled before their command was dequeued
        self._lock = threading.Lock()
        self.stopping = False  # `quit` (or EOF) came: the running job is cancelled, the queued ones never start

    def cancel(self, run_id: Any = None) -> None:
        """Cancel the running run (only if it is `run_id`, when given; a queued one when it comes)."""
        with self._lock:
            if self._token is not None and (run_id is None or run_id == self._run_id):
                self._token.cancel()
            elif run_id is not None:
                self._cancelled_early.add(run_id)

    def boot(self, threads: int, protocol: int) -> None:
        import torch  # the slow part (seconds): the GUI is already on screen

        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # already set by someone
        import ghostviewer.engine.loading.pipelines  # noqa: F401 - import everything now: 'ready' means ready
        import ghostviewer.engine.run.runner  # noqa: F401
        from ghostviewer.engine.faults import list_faults
        from ghostviewer.engine.loading.schedulers import available_schedulers

        self.emit("ready", pid=os.getpid(), protocol=protocol, torch=torch.__version__, threads=threads,
                  schedulers=available_schedulers(), faults=list_faults(),
                  devices=["cpu", *["cuda"] * torch.cuda.is_available(), *["mps"] * torch.backends.mps.is_available()])

    def handle(self, command: dict[str, Any]) -> None:
        from ghostviewer.engine.errors import GhostError
        from ghostviewer.record import RecordError

        name, ident = command["cmd"], command.get("id")
        handler = getattr(self, f"_cmd_{name}", None)
        if handler is None:
            self.emit("error", message=f"unknown command {name!r}", cmd=name, id=ident)
            return
        try:
            handler(command, ident)
        except (GhostError, RecordError) as exc:
            self.emit("error", message=str(exc), cmd=name, id=ident)

    def _require_pipeline(self) -> Any:
        from ghostviewer.engine.errors import GhostError

        if self.loaded is None:
            raise GhostError("no pipeline is loaded yet; load one first")
        return self.loaded

    def _cmd_load(self, command: dict[str, Any], ident: Any) -> None:
        from ghostviewer.engine.loading.pipelines import load_pipeline
        from ghostviewer.engine.loading.schedulers import scheduler_name

        # Loading is a transaction: the working pipeline stays until the new one has loaded (a failed load leaves
        # it as it was, and nothing half-loaded); for a moment both are in memory.
        loaded = load_pipeline(str(command.get("source") or "demo"), command.get("device") or "auto",
                               command.get("dtype") or None, bool(command.get("allow_pickle", False)))
        self.loaded = loaded
        pipe = loaded.pipe
        vae = getattr(pipe, "vae", None)
        self.emit("loaded", id=ident, source=loaded.source, kind=loaded.source_kind, device=loaded.device,
                  dtypes=loaded.dtypes, pipeline=type(pipe).__name__, scheduler=scheduler_name(pipe.scheduler),
                  latent_channels=None if vae is None else vae.config.get("latent_channels"),
                  weight_hashes=dict(loaded.weight_hashes))

    def _cmd_blocks(self, command: dict[str, Any], ident: Any) -> None:
        from ghostviewer.engine.tracing.blocks import discover_blocks

        blocks = discover_blocks(self._require_pipeline().pipe)
        self.emit("blocks", id=ident, blocks=[block.to_json() for block in blocks])

    def _cmd_run(self, command: dict[str, Any], ident: Any) -> None:
        from ghostviewer.engine.errors import GhostError
        from ghostviewer.engine.loops.recorded import replay_run
        from ghostviewer.engine.run.runner import RunFailed, execute_run
        from ghostviewer.record import RecordError
        from ghostviewer.spec import RunSpec

        ended: list[str] = []

        def progress(event: dict[str, Any]) -> None:
            if event.get("event") in ("finished", "cancelled", "failed"):
                ended.append(event["event"])
            self.emit(**{**event, "id": ident})

        self._start_job(ident)
        try:
            loaded = self._require_pipeline()
            settings = RunSpec.from_dict(dict(command.get("settings") or {}))
            runs_dir = Path(str(command.get("runs_dir"))).expanduser()
            if command.get("replay_of"):
                replay_run(loaded, settings, str(command["replay_of"]), runs_dir, self._token, progress)
            else:
                execute_run(loaded, settings, runs_dir, self._token, progress)
        except RunFailed:
            pass  # the runner already sent 'failed' with the run folder
        except (GhostError, RecordError, TypeError, ValueError) as exc:
            if not ended:
                self.emit("failed", id=ident, run_dir=None, error=str(exc))
        except Exception as exc:  # a bug of ours: the run still ends, as failed, and the log keeps the traceback
            traceback.print_exc(file=sys.stderr)
            if not ended:
                self.emit("failed", id=ident, run_dir=None, error=f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._token = self._run_id = None
            torch = sys.modules.get("torch")  # a failed run (out of memory) leaves its blocks cached: hand them back
            if "finished" not in ended and torch is not None and torch.cuda.is_available():
                torch.cuda.empty_cache()

    def _start_job(self, ident: Any) -> None:
        """A cancellable job begins: its own token, already cancelled when a cancel for it came before it was
        dequeued (a run, sweep, bisection or probe battery the user stopped while it waited)."""
        with self._lock:
            self._token, self._run_id = _new_token(), ident
            if ident in self._cancelled_early:
                self._cancelled_early.discard(ident)
                self._token.cancel()

    def _cmd_sweep(self, command: dict[str, Any], ident: Any) -> None:
        """{"cmd": "sweep", "list": PATH | "items": [...], "seeds": "0-9", "settings": {...}, "runs_dir": DIR,
        "study_dir": DIR (resume), "outside_files": true (the user let the list name files outside its folder)}:
        sweep_progress events, then sweep_finished or sweep_failed."""
        from ghostviewer.engine.loops.sweep import run_sweep
        from ghostviewer.spec.prompt_lists import ListOptions

        self._start_job(ident)
        settings = dict(command.get("settings") or {})
        keys = ("steps", "guidance", "faults", "bypass", "scheduler", "dtype", "device", "trace_depth")
        options = {k: settings[k] for k in keys if settings.get(k) is not None}
        if "negative_prompt" in settings:
            options["negative"] = settings["negative_prompt"] or ""
        if command.get("outside_files") is True:
            options["list_options"] = ListOptions(outside_files=True)
        loaded, ray = self.loaded, command.get("ray") or None
        same = loaded is not None and not ray and str(settings.get("source") or "demo") == loaded.source
        try:
            result = run_sweep(
                command.get("list") or command.get("items"), command.get("seeds") or "0-9",
                source=str(settings.get("source") or "demo"), pipeline=loaded if same else None,
                runs_dir=Path(str(command.get("runs_dir") or ".")).expanduser(), study_dir=command.get("study_dir"),
                ray=ray, on_progress=lambda event: self.emit(**{**event, "id": ident}), cancel=self._token, **options)
            summary = {k: v for k, v in result.items() if k != "runs"}
            self.emit("sweep_finished", id=ident, **summary)
        except Exception as exc:  # noqa: BLE001 - a sweep that cannot go on says why in one line
            self.emit("sweep_failed", id=ident, error=" ".join(f"{exc}".split()) or type(exc).__name__)
        finally:
            with self._lock:
                self._token = self._run_id = None

    def _cmd_bisect(self, command: dict[str, Any], ident: Any) -> None:
        """{"cmd": "bisect", "run_dir": DIR, "runs_dir": DIR (where the study goes)}: bisection by bypass.
        bisect_progress events ({"stage": bisect_started | trial_started | trial_step | trial | narrowed, ...}),
        then bisect_finished {"result": ...}; a run that cannot be bisected: error (one line)."""
        from ghostviewer.engine.errors import GhostError
        from ghostviewer.engine.loops.bisect_blocks import bisect_run

        if not command.get("run_dir"):
            raise GhostError("bisect needs a run_dir")
        self._start_job(ident)

        def progress(event: dict[str, Any]) -> None:
            stage = event.get("event")
            if stage != "bisect_finished":  # sent below, with the whole result
                self.emit("bisect_progress", id=ident, stage=stage, **{k: v for k, v in event.items() if k != "event"})

        runs_dir = Path(str(command["runs_dir"])).expanduser() if command.get("runs_dir") else None
        try:
            result = bisect_run(str(command["run_dir"]), runs_dir=runs_dir, on_progress=progress, cancel=self._token)
            self.emit("bisect_finished", id=ident, result=result)
        finally:
            with self._lock:
                self._token = self._run_id = None

    def _cmd_judge_against(self, command: dict[str, Any], ident: Any) -> None:
        """{"cmd": "judge_against", "run_dir", "reference": SRC | "baseline": FILE, "runs_dir"}: see the module doc."""
        from dataclasses import replace

        from ghostviewer.engine.errors import GhostError
        from ghostviewer.engine.loading.pipelines import load_pipeline
        from ghostviewer.engine.loops.recorded import fits_run, open_recorded
        from ghostviewer.engine.run.reference_run import compare_with_reference
        from ghostviewer.engine.run.runner import execute_run

        run_dir = str(command.get("run_dir") or "")
        if not run_dir or not (command.get("reference") or command.get("baseline")):
            raise GhostError("judge_against needs a run_dir and a reference or a baseline")
        record, settings = open_recorded(run_dir)
        runs_dir = Path(str(command.get("runs_dir") or Path(run_dir).parent)).expanduser()
        mine = self.loaded if fits_run(self.loaded, record, settings) else None
        if command.get("baseline"):
            suspect = mine or load_pipeline(settings.source, device="auto")
            result = execute_run(suspect, replace(settings, device=suspect.device), runs_dir,
                                 baseline=Path(str(command["baseline"])).expanduser())
            self.emit("judged", id=ident, run_dir=run_dir, result=result)
            return
        device = self.loaded.device if self.loaded is not None else "auto"
        reference = load_pipeline(str(command["reference"]), device=device)
        result = compare_with_reference({"run_dir": run_dir}, reference, runs_dir, mine)
        self.emit("reference_finished", id=ident, run_dir=run_dir, result=result)

    def _cmd_probe(self, command: dict[str, Any], ident: Any) -> None:
        """{"cmd": "probe", "runs_dir", "steps", "prompt", "probes"}: the loaded pipeline's probes (no baseline needed);
        probe_progress events, then probe_finished with the report (cancel like a run)."""
        from ghostviewer.engine.loops.probe import DEFAULT_STEPS, run_probes

        loaded = self._require_pipeline()
        self._start_job(ident)
        runs_dir = Path(str(command.get("runs_dir") or ".")).expanduser()
        try:
            probes = tuple(command.get("probes") or ()) or None
            report = run_probes(loaded, runs_dir, prompt=command.get("prompt"), probes=probes,
                                steps=int(command.get("steps") or DEFAULT_STEPS), cancel=self._token,
                                on_progress=lambda event: self.emit(
                                    "probe_progress", id=ident, stage=event.get("event"),
                                    **{k: v for k, v in event.items() if k != "event"}))
            self.emit("probe_finished", id=ident, result=report)
        finally:
            with self._lock:
                self._token = self._run_id = None

    def _cmd_decode(self, command: dict[str, Any], ident: Any) -> None:
        step, tensor = int(command["step"]), str(command.get("tensor") or "latents")
        sample = int(command.get("sample") or 0)
        path = decode_step(self._require_pipeline(), Path(str(command["run_dir"])), step, tensor, sample)
        self.emit("decoded", id=ident, run_dir=str(command["run_dir"]), step=step, tensor=tensor, sample=sample,
                  path=str(path))

    def _cmd_isolate(self, command: dict[str, Any], ident: Any) -> None:
        """{"cmd": "isolate", "run_dir", "module", "step", "out", "fuzz"}: 'isolated' with api.isolate's dict."""
        from ghostviewer import api
        from ghostviewer.engine.loops.recorded import fits_run, open_recorded

        run_dir = str(command["run_dir"])
        record, settings = open_recorded(run_dir)
        same = fits_run(self.loaded, record, settings)  # else loaded for the run, as recorded
        step = command.get("step")
        result = api.isolate(run_dir, module=str(command["module"]), step=None if step is None else int(step),
                             out=str(command["out"]), fuzz=bool(command.get("fuzz")),
                             pipeline=self.loaded if same else None)
        self.emit("isolated", id=ident, **result)

    def _cmd_export(self, command: dict[str, Any], ident: Any) -> None:
        """{"cmd": "export", "run_dirs", "out", "include_tensors", "include_feature_maps"}: a bug-report bundle with
        each run's first bad module's inputs (api.export(with_inputs=True): the runs are re-run here, on the
        loaded pipeline when it is theirs). export_progress {"run_id", "module", "step"} before each re-run, then
        exported (api.export's dict) or export_failed {"error": one line}."""
        from ghostviewer import api
        from ghostviewer.engine.errors import GhostError
        from ghostviewer.record import RecordError

        try:
            result = api.export(
                [str(d) for d in command.get("run_dirs") or []], str(command["out"]),
                include_tensors=bool(command.get("include_tensors", True)),
                include_feature_maps=bool(command.get("include_feature_maps", True)), with_inputs=True,
                pipeline=self.loaded,
                on_progress=lambda event: self.emit("export_progress", id=ident,
                                                    **{k: v for k, v in event.items() if k != "event"}))
        except (GhostError, RecordError, KeyError) as exc:
            self.emit("export_failed", id=ident, error=" ".join(str(exc).split()) or type(exc).__name__)
            return
        self.emit("exported", id=ident, **result)


def _new_token() -> Any:
    from ghostviewer.engine.run.runner import CancelToken

    return CancelToken()


def decode_name(step: int, tensor: str = "latents", sample: int = 0) -> str:
    """The decode's image name in the run: step_NNNN_decoded[_x0] for the first image (as before batches), with
    `_sample_K` (0-based) for a batch's other images."""
    return (f"step_{step:04d}_decoded" + ("" if tensor == "latents" else f"_{tensor}")
            + (f"_sample_{sample}" if sample else ""))


def decode_step(loaded: Any, run_dir: Path, step: int, tensor: str = "latents", sample: int = 0) -> Path:
    """Full VAE decode of one step's latents (or predicted x0) of image `sample` of a batch (0: the first, and a
    run of one image), added to the run through its record as images/step_NNNN_decoded*.png (decode_name).
    Decoded in the dtype the run's VAE had; refused when the loaded pipeline's weights are not the ones the run
    was made with, or when the step kept no tensors of that image."""
    import numpy as np
    import torch

    from ghostviewer.engine.errors import GhostError
    from ghostviewer.engine.loading.devices import DTYPES
    from ghostviewer.record import RunRecord
    from ghostviewer.record.writer import annex_image

    record = RunRecord(run_dir)
    made_with = (record.environment or {}).get("pipeline") or {}
    recorded_hashes = made_with.get("weight_hashes") or {}
    vae_hash = recorded_hashes.get("vae")
    if vae_hash and loaded.weight_hashes.get("vae") and vae_hash != loaded.weight_hashes["vae"]:
        raise GhostError(f"the loaded pipeline's VAE is not the one run {record.run_id} was made with "
                         f"(load {made_with.get('source')} to decode its steps)")
    tensors = record.step_tensors(step)
    if tensor not in tensors:
        raise GhostError(f"step {step} of {run_dir.name} has no recorded {tensor!r} to decode")
    if sample:  # a batch's other image: its own step tensors (N, C, H, W), kept since batches record every sample's
        every = tensors.get(f"sample_{tensor}")
        if every is None or not 0 <= sample < len(every):
            raise GhostError(f"step {step} of {run_dir.name} kept no {tensor} of image {sample + 1} (the record "
                             "keeps image 1's only): nothing of it to decode")
        tensors = {tensor: every[sample]}
    vae = getattr(loaded.pipe, "vae", None)
    if vae is None:
        raise GhostError("the loaded pipeline has no VAE to decode with")
    latents = np.asarray(tensors[tensor], np.float32)
    channels = vae.config.get("latent_channels")
    if latents.ndim != 3 or latents.shape[0] != channels:
        raise GhostError(f"latents of shape {latents.shape} do not fit this VAE ({channels} channels); "
                         "load the pipeline the run was made with")
    run_dtype = DTYPES.get(str(((made_with.get("components") or {}).get("vae") or {}).get("dtype")), vae.dtype)
    loaded_dtype = vae.dtype
    scaling = float(vae.config.get("scaling_factor") or 1.0)
    shift = float(vae.config.get("shift_factor") or 0.0)
    try:
        if run_dtype != loaded_dtype:
            vae.to(run_dtype)  # the run's own precision: an fp16 overflow must come back when decoded
        z = torch.from_numpy(latents)[None].to(device=vae.device, dtype=run_dtype)
        with torch.inference_mode():
            image = vae.decode(z / scaling + shift).sample[0].float().cpu().numpy()
    finally:
        if vae.dtype != loaded_dtype:
            vae.to(loaded_dtype)
    return annex_image(run_dir, decode_name(step, tensor, sample), image.transpose(1, 2, 0) / 2.0 + 0.5, step=step)


def lower_priority() -> int:
    """GHOSTVIEWER_ENGINE_NICE (default 0: off) is added to this process's niceness, to favour the window on a
    busy machine. Measured on 2 shared cores: no gain in stalls, runs twice as slow under background load."""
    wanted = os.environ.get("GHOSTVIEWER_ENGINE_NICE", "0")
    try:
        return os.nice(int(wanted)) if hasattr(os, "nice") and int(wanted) > 0 else 0
    except (ValueError, OSError):
        return 0


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in the terminal is for the GUI, which stops us
    lower_priority()
    emit = Emitter(protocol_stream())
    session = EngineSession(emit)
    commands: queue.Queue[dict[str, Any]] = queue.Queue()
    reader = threading.Thread(target=read_commands, args=(sys.stdin, commands, session, emit), daemon=True)
    reader.start()
    session.boot(engine_threads(), PROTOCOL_VERSION)
    return serve(commands, session, emit)


def serve(commands: queue.Queue[dict[str, Any]], session: Any, emit: Emitter) -> int:
    """Carry out the queued commands one at a time until `quit`. Once it has come, the commands queued before it
    are dropped, not run: a window that closes while runs wait behind the running one is not kept waiting for
    them (it would give up after its stop timeout and kill the engine)."""
    while True:
        command = commands.get()
        if command["cmd"] == "quit":
            emit("bye", id=command.get("id"))
            return 0
        if session.stopping:
            continue
        try:
            session.handle(command)
        except Exception as exc:  # a bug of ours: one line to the GUI, the traceback to its log
            traceback.print_exc(file=sys.stderr)
            emit("error", message=f"{type(exc).__name__}: {exc}", cmd=command["cmd"], id=command.get("id"))


if __name__ == "__main__":
    sys.exit(main())

"""The `ghostviewer` command (CONTRACT.md): GUI by default, headless subcommands for scripts and CI.

Exit codes: 0 healthy/done, 1 a problem found in the pipeline, 2 bad input or usage. With `--json`, exactly
one JSON document goes to stdout; logs and progress go to stderr. No traceback reaches the user: unexpected
errors are summarised in one line and written in full to the log folder.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ghostviewer.cli.baseline import add_baseline_parser, cmd_baseline
from ghostviewer.cli.doctor import add_doctor_parser, cmd_doctor
from ghostviewer.cli.isolate import add_isolate_parser, cmd_isolate
from ghostviewer.cli.sweep import add_sweep_parser, cmd_sweep
from ghostviewer.paths import default_runs_dir, log_dir

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's exits are usage errors: status 2, one line
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _add_source(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument(
        "--pipeline",
        default=None if required else "demo",
        required=required,
        metavar="SRC",
        help="'demo', a diffusers folder, a .safetensors checkpoint or a cached hub id",
    )
    p.add_argument("--allow-pickle", action="store_true", help="allow .bin/.ckpt/.pt weights (they can run code)")
    p.add_argument(
        "--config",
        metavar="DIR",
        help="for a single-file checkpoint: a diffusers folder or cached hub "
        "id of the same model family that supplies its configs, tokenizers and scheduler",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ghostviewer", description="Hunt intermittent bugs in diffusion pipelines.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    gui = sub.add_parser("gui", help="open the desktop app")
    gui.add_argument("path", nargs="?", help="pipeline folder, run folder, bundle or prompt list")

    blocks = sub.add_parser("blocks", help="list a pipeline's blocks and whether they can be bypassed")
    _add_source(blocks)
    blocks.add_argument("--json", action="store_true")

    run = sub.add_parser("run", help="run a prompt, traced and recorded")
    _add_source(run)
    run.add_argument("--prompt", required=True)
    run.add_argument("--negative", default="")
    run.add_argument("--seed", type=int, default=0, help="-1 picks a random seed (and records it)")
    run.add_argument("--steps", type=int, default=20)
    run.add_argument("--guidance", type=float, help="default: the pipeline family's usual guidance (7.5 for SD)")
    run.add_argument("--width", type=int)
    run.add_argument("--height", type=int)
    run.add_argument("--scheduler")
    run.add_argument("--dtype", help="float32|float16|bfloat16, or per component: float32,vae=float16")
    run.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    run.add_argument("--bypass", action="append", default=[], metavar="MODULE[@START:END]")
    run.add_argument("--capture", action="append", default=[], metavar="PATTERN")
    run.add_argument("--fault", action="append", default=[], metavar="NAME")
    run.add_argument("--trace-depth", default="block", choices=["block", "leaf"])
    run.add_argument("--capture-attention", action="store_true", help="record cross-attention maps per token")
    run.add_argument("--runs-dir")
    run.add_argument("--no-memory-check", action="store_true", help="run a size the memory estimate refuses")
    run.add_argument("--json", action="store_true")

    replay = sub.add_parser("replay", help="re-run a recorded run N times and say where it stops reproducing")
    replay.add_argument("run_dir", metavar="RUN_DIR")
    replay.add_argument("--times", type=int, default=1)
    replay.add_argument("--allow-pickle", action="store_true")
    replay.add_argument("--runs-dir", help="where the replay study goes (default: beside the run)")
    replay.add_argument("--json", action="store_true")

    compare = sub.add_parser("compare", help="compare two recorded runs: settings and the first divergence")
    compare.add_argument("run_a", metavar="RUN_A")
    compare.add_argument("run_b", metavar="RUN_B")
    compare.add_argument("--json", action="store_true")

    bisect = sub.add_parser("bisect", help="find the block (or, with --settings, the settings) that breaks a run")
    bisect.add_argument("run_dir", metavar="RUN_DIR")
    bisect.add_argument("--settings", metavar="GOOD_RUN_DIR", help="bisect the settings against this good run")
    bisect.add_argument("--allow-pickle", action="store_true")
    bisect.add_argument("--runs-dir", help="where the bisect study goes")
    bisect.add_argument("--json", action="store_true")

    export = sub.add_parser("export", help="write a bug-report bundle (.zip) of one or more runs")
    export.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    export.add_argument("-o", "--output", required=True, metavar="BUNDLE.zip")
    export.add_argument("--no-tensors", action="store_true", help="leave out step tensors (previews stay)")
    export.add_argument("--no-feature-maps", action="store_true", help="leave out feature and attention maps")
    export.add_argument("--with-inputs", action="store_true",
                        help="add the first bad module's real inputs, weights and a standalone repro.py "
                        "(re-runs each run up to its first anomaly; needs the pipeline)")
    export.add_argument("--allow-pickle", action="store_true",
                        help="with --with-inputs: allow .bin/.ckpt/.pt weights (they can run code)")
    export.add_argument("--json", action="store_true")

    inspect = sub.add_parser("inspect", help="summarise a bundle (read-only: runs nothing from it)")
    inspect.add_argument("bundle", metavar="BUNDLE.zip")
    inspect.add_argument("--json", action="store_true")

    add_sweep_parser(sub)
    add_isolate_parser(sub)
    add_baseline_parser(sub)
    add_doctor_parser(sub)

    demo = sub.add_parser("demo", help="generate a demo image, or list the ghost lab's fault presets")
    demo.add_argument("--list-faults", action="store_true")
    demo.add_argument("--prompt", default="a red circle on a blue background, top left")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--runs-dir")
    demo.add_argument("--json", action="store_true")
    return parser


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def _progress_printer(quiet: bool):
    started = time.perf_counter()

    def show(event: dict[str, Any]) -> None:
        if quiet or event.get("event") != "step":
            return
        step, steps = event["step"] + 1, event["steps"]
        bar = "#" * int(20 * step / steps)
        sys.stderr.write(f"\r  step {step:>3}/{steps} [{bar:<20}] {time.perf_counter() - started:5.1f}s")
        if step == steps:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _is_problem(result: dict[str, Any]) -> bool:
    verdict = result.get("verdict") or {}
    return verdict.get("label", "ok") != "ok" or result.get("first_anomaly") is not None


def _describe_run(result: dict[str, Any]) -> str:
    verdict = result.get("verdict") or {}
    lines = [
        f"verdict: {verdict.get('label', result.get('status', '?'))}"
        + (f" ({verdict['reason']})" if verdict.get("reason") else ""),
        f"image:   {result.get('image')}",
        f"run:     {result['run_dir']}",
    ]
    anomaly = result.get("first_anomaly")
    if anomaly:
        where = f"step {anomaly['step']}" if anomaly.get("step") is not None else anomaly["phase"]
        z = anomaly.get("z")
        drift = f", {anomaly.get('stat')} {z:+.1f} robust z-units off its healthy range" if z is not None else ""
        lines.append(f"first anomaly: {anomaly['kind']} in {anomaly['module']} ({where}{drift})")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    from ghostviewer import api

    result = api.run(
        args.pipeline,
        args.prompt,
        negative=args.negative,
        seed=args.seed,
        steps=args.steps,
        guidance=args.guidance,
        width=args.width,
        height=args.height,
        scheduler=args.scheduler,
        dtype=args.dtype,
        device=args.device,
        bypass=args.bypass,
        capture=args.capture,
        faults=args.fault,
        trace_depth=args.trace_depth,
        capture_attention=args.capture_attention,
        config=args.config,
        runs_dir=args.runs_dir,
        allow_pickle=args.allow_pickle,
        on_progress=_progress_printer(quiet=not sys.stderr.isatty()),
        memory_check=not args.no_memory_check,
    )
    _print_json(result) if args.json else print(_describe_run(result))
    return EXIT_PROBLEM if _is_problem(result) else EXIT_OK


def cmd_blocks(args: argparse.Namespace) -> int:
    from ghostviewer import api

    result = api.blocks(args.pipeline, allow_pickle=args.allow_pickle, config=args.config)
    if args.json:
        _print_json(result)
    else:
        for block in result["blocks"]:
            mark = f"bypassable ({block['bypass'].replace('_', ' ')})" if block["bypassable"] else ""
            print(f"{block['module']:<56} {block['kind']:<28} {mark}")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from ghostviewer import api

    if args.list_faults:
        result = api.faults()
        if args.json:
            _print_json(result)
        else:
            for fault in result["faults"]:
                print(f"{fault['name']:<26} {fault['description']}")
        return EXIT_OK
    result = api.run("demo", args.prompt, seed=args.seed, runs_dir=args.runs_dir)
    _print_json(result) if args.json else print(result["image"])
    return EXIT_PROBLEM if _is_problem(result) else EXIT_OK


def _where(divergence: dict[str, Any]) -> str:
    from ghostviewer.analysis.compare import describe_divergence

    return describe_divergence(divergence)


def cmd_replay(args: argparse.Namespace) -> int:
    from ghostviewer import api

    def progress(event: dict[str, Any]) -> None:
        if event.get("event") == "replayed":
            state = "bit-identical" if event["reproduced"] else f"differs: {_where(event['first_divergence'])}"
            print(f"  replay {event['run']}/{event['times']}: {state}", file=sys.stderr)

    result = api.replay(args.run_dir, times=args.times, runs_dir=args.runs_dir, allow_pickle=args.allow_pickle,
                        on_progress=progress)
    if args.json:
        _print_json(result)
    else:
        print(f"{result['summary']} (seed {result['seed']}); study: {result['study_dir']}")
        if result["first_divergence"]:
            print(f"first divergence: run {result['first_divergence']['run']}, {_where(result['first_divergence'])}")
        for key, (a, b) in result["environment_diff"].items():
            print(f"environment differs: {key}: {a} vs {b}")
    return EXIT_OK if result["reproduced"] else EXIT_PROBLEM


def cmd_compare(args: argparse.Namespace) -> int:
    from ghostviewer import api

    result = api.compare(args.run_a, args.run_b)
    if args.json:
        _print_json(result)
    else:
        print("same: every recorded output is bit-identical" if result["same"] else "the runs differ")
        for key, (a, b) in result["settings_diff"].items():
            print(f"  setting {key}: {a!r} vs {b!r}")
        if result["first_divergence"]:
            print(f"first divergence: {_where(result['first_divergence'])}")
        print(f"verdicts: {result['verdicts'][0]} vs {result['verdicts'][1]}")
    return EXIT_OK if result["same"] else EXIT_PROBLEM


def _trial_line(entry: dict[str, Any]) -> str:
    """'bypassed unet.mid_block -> nan, symptom present' (a bisection trail entry, either kind)."""
    if "bypassed" in entry:
        what = "bypassed " + ", ".join(entry["bypassed"]) if entry["bypassed"] else "re-run unchanged"
    elif "patched" in entry:
        what = f"patched {entry['patched']} from the reference"
    elif "reference_for" in entry:
        what = f"reference for patching {entry['reference_for']}"
    else:
        what = "bad values kept: " + (", ".join(entry.get("kept_bad") or []) or "none")
    state = {True: "symptom present", False: "symptom gone", None: "no answer"}[entry.get("symptom")]
    healthy = ", healthy" if entry.get("healthy") else ""
    return f"{what} -> {entry.get('verdict')}, {state}{healthy}"


def cmd_bisect(args: argparse.Namespace) -> int:
    from ghostviewer import api

    def progress(event: dict[str, Any]) -> None:
        if event.get("event") == "bisect_started":
            todo = event.get("candidates", event.get("differences")) or []
            print(f"  bisecting {event['symptom']} over {len(todo)} candidates", file=sys.stderr)
        elif event.get("event") == "trial":
            print(f"  {event['role']} {event['trial']}: {_trial_line(event)}", file=sys.stderr)

    result = api.bisect(args.run_dir, args.settings, runs_dir=args.runs_dir, allow_pickle=args.allow_pickle,
                        on_progress=progress)
    if args.json:
        _print_json(result)
        return EXIT_PROBLEM
    for index, entry in enumerate(result["trail"], 1):
        print(f"re-run {index}: {_trial_line(entry)}")
    if "culprit_settings" in result:
        for key, (good, bad) in result["culprit_settings"].items():
            print(f"culprit setting: {key}: {good!r} (good) -> {bad!r} (bad)")
    elif result["culprit"]:
        print(f"culprit: {result['culprit']} ({result['reruns']} re-run(s), budget {result['budget']})")
        patching = result.get("patching")
        if patching:
            state = "healthy" if patching["healthy"] else f"{patching['verdict']}, not healthy"
            print(f"patching {patching['module']} from {patching['reference']}: {state}")
        else:
            print(f"patching: skipped ({result.get('patching_note')})")
    else:
        print(f"culprit: none ({result.get('reason')})")
    print(f"study: {result['study_dir']}")
    return EXIT_PROBLEM  # a bisection only runs on a failing run, and it reports what makes it fail


def _inputs_text(isolate: dict[str, Any]) -> str:
    """What `--with-inputs` bundled for a run, or why nothing."""
    if not isolate.get("folder"):
        return f"none ({isolate.get('reason')})"
    step = f"step {isolate['step']}" if isolate.get("step") is not None else "its first call"
    repro = (f"repro: cd {isolate['folder']} && python repro.py" if isolate.get("repro")
             else f"no repro: {isolate.get('reason')}")
    return f"{isolate.get('module')} ({step}) in {isolate['folder']}/; {repro}"


def cmd_export(args: argparse.Namespace) -> int:
    from ghostviewer import api

    def progress(event: dict[str, Any]) -> None:
        if event.get("event") == "isolating":
            step = f" at step {event['step']}" if event.get("step") is not None else ""
            print(f"  re-running {event['run_id']} to isolate {event['module']}{step}…", file=sys.stderr)

    if Path(args.output).exists():  # a run's own database, a file of the user's: never overwritten
        raise UsageError(f"{args.output} already exists; GhostViewer does not overwrite it (choose another name)")
    result = api.export(
        args.run_dirs, args.output, include_tensors=not args.no_tensors, include_feature_maps=not args.no_feature_maps,
        with_inputs=args.with_inputs, on_progress=progress, allow_pickle=args.allow_pickle,
    )
    if args.json:
        _print_json({"bundle": result["bundle"], "size": result["size"], "runs": result["runs"]})
    else:
        print(f"{result['bundle']} ({result['size'] / 1024:.1f} KiB, {len(result['runs'])} run(s))")
        for run in result["runs"]:
            if "isolate" in run:
                print(f"  {run['run_id']} module inputs: {_inputs_text(run['isolate'])}")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    from ghostviewer import api
    from ghostviewer.record.bundle_texts import command_line

    result = api.inspect(args.bundle)
    problem = any(_is_problem(run) or run.get("status") == "failed" for run in result["runs"])
    if args.json:
        _print_json(result)
        return EXIT_PROBLEM if problem else EXIT_OK
    manifest = result["manifest"]
    shown = _printable  # a bundle is someone else's file: its text reaches the terminal without control codes
    print(f"bundle:  {shown(args.bundle)} ({len(result['files'])} files, {result['size'] / 1024:.1f} KiB), "
          f"made {shown(manifest['created_at'])} by GhostViewer {shown(manifest['ghostviewer'])}")
    for run, entry in zip(result["runs"], manifest["runs"], strict=True):
        verdict = (run.get("verdict") or {}).get("label", run["status"])
        print(f"run {shown(run['run_id'])}: verdict {shown(verdict)}, status {shown(run['status'])}, seed "
              f"{run['seed']}, {shown(run['steps'])} steps, prompt {run['prompt']!r}")
        anomaly = run.get("first_anomaly")
        if anomaly:
            where = f"step {anomaly['step']}" if anomaly.get("step") is not None else anomaly["phase"]
            print(f"  first anomaly: {shown(anomaly['kind'])} in {shown(anomaly['module'])} ({shown(where)})")
        if entry.get("command"):  # rebuilt from the recorded settings: a bundle's own line could say anything
            rebuilt = command_line(entry["settings"])
            differs = "" if rebuilt == entry["command"] else "  (the bundle's own command line differs; not shown)"
            print(f"  reproduce: {shown(rebuilt)}{differs}")
        if entry.get("isolate"):
            print(f"  module inputs: {shown(_inputs_text(entry['isolate']))}")
            for name in entry["isolate"].get("files") or []:
                print(f"      {shown(name)}")
    return EXIT_PROBLEM if problem else EXIT_OK


def _printable(value: object) -> str:
    """Text with control characters (terminal escape codes, carriage returns) shown as escapes, not obeyed."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))


def cmd_gui(args: argparse.Namespace) -> int:
    from ghostviewer.gui.app import main as gui_main

    return gui_main(getattr(args, "path", None))


COMMANDS = {
    "run": cmd_run,
    "blocks": cmd_blocks,
    "demo": cmd_demo,
    "gui": cmd_gui,
    "replay": cmd_replay,
    "compare": cmd_compare,
    "bisect": cmd_bisect,
    "export": cmd_export,
    "inspect": cmd_inspect,
    "sweep": cmd_sweep,
    "isolate": cmd_isolate,
    "baseline": cmd_baseline,
    "doctor": cmd_doctor,
}


def _quiet_libraries() -> None:
    # Library chatter stays off stderr (diffusers logs a missing .safetensors as an *error* before it falls back
    # to the pickle the user allowed); set these variables yourself to see it. Python warnings go the same way.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "critical")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "critical")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger().setLevel(logging.ERROR)
    logging.captureWarnings(True)


def main(argv: Sequence[str] | None = None) -> int:
    from ghostviewer.engine.errors import GhostError  # torch-free module
    from ghostviewer.record import RecordError  # torch-free; bundles' BundleError is one

    global _JSON_ERRORS
    _JSON_ERRORS = "--json" in (sys.argv[1:] if argv is None else list(argv))
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code == EXIT_USAGE:  # argparse said what is wrong on stderr
                _json_error("the command line is not valid (see the message above)", EXIT_USAGE)
            raise
        command = args.command or "gui"
        if command != "gui":
            _quiet_libraries()
            if getattr(args, "runs_dir", None) is None and hasattr(args, "runs_dir"):
                args.runs_dir = str(default_runs_dir())
        return COMMANDS[command](args)
    except (UsageError, GhostError, RecordError) as exc:
        return _failure(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        return _failure("interrupted", 130)
    except OSError as exc:  # a folder or file of the user's that cannot be read or written (not a pipeline crash)
        if exc.filename is None:
            return _internal_error(exc)
        return _failure(f"cannot use {exc.filename}: {exc.strerror or exc}", EXIT_USAGE)
    except Exception as exc:  # a bug or a pipeline crash: one line here, the traceback in the log
        return _internal_error(exc)


_JSON_ERRORS = False  # the command asked for --json: a failure is a JSON document on stdout too (CONTRACT)


def _json_error(message: str, code: int, **extra: Any) -> None:
    if _JSON_ERRORS:
        print(json.dumps({"error": message, "exit_code": code, **extra}, ensure_ascii=True))


def _failure(message: str, code: int, **extra: Any) -> int:
    """One line on stderr, and with --json the same as {"error", "exit_code", ...} on stdout."""
    print(f"ghostviewer: {message}", file=sys.stderr)
    _json_error(message, code, **extra)
    return code


def _internal_error(exc: BaseException) -> int:
    """One line on stderr, the traceback in the log (when the log can be written at all)."""
    from ghostviewer.engine.run.runner import RunFailed

    log: Path | None = None
    try:
        log = log_dir() / "ghostviewer-cli.log"
        with log.open("a", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv)}\n{traceback.format_exc()}\n")
    except OSError:
        log = None
    # Never EXIT_USAGE: the input was not at fault. A crash of ours is a problem found (1), and says so.
    what = "" if isinstance(exc, RunFailed) else "internal error (a bug of GhostViewer's): "
    where = f"; the partial run is in {exc.run_dir}" if isinstance(exc, RunFailed) else ""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    details = f" (details in {log})" if log is not None else ""
    message = f"{what}{text}{where}{details}".encode("utf-8", "backslashreplace").decode("utf-8")
    extra = {"run_dir": str(exc.run_dir)} if isinstance(exc, RunFailed) else {}
    return _failure(message, EXIT_PROBLEM, **extra)


ENGINE_SERVER_FLAG = "--engine-server"  # a frozen app runs its engine process as `<app> --engine-server`


def entry_point(argv: Sequence[str]) -> Callable[[], int]:
    """What the executable runs for these arguments: the engine server (a frozen app's engine process, started
    by ghostviewer.gui.link.engine_client from the app's own executable), else the `ghostviewer` command."""
    if list(argv[:1]) == [ENGINE_SERVER_FLAG]:
        from ghostviewer.engine.server import main as engine_server_main

        return engine_server_main
    return lambda: main(list(argv))

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
from collections.abc import Sequence
from typing import Any

from ghostviewer.paths import default_runs_dir, log_dir

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's exits are usage errors: status 2, one line
        raise UsageError(f"{message} (see 'ghostviewer {self.prog.split()[-1]} --help')")


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
    run.add_argument("--guidance", type=float, default=7.5)
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
    run.add_argument("--json", action="store_true")

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
        f"verdict: {verdict.get('label', result.get('status', '?'))}",
        f"image:   {result.get('image')}",
        f"run:     {result['run_dir']}",
    ]
    anomaly = result.get("first_anomaly")
    if anomaly:
        where = f"step {anomaly['step']}" if anomaly.get("step") is not None else anomaly["phase"]
        lines.append(f"first anomaly: {anomaly['kind']} in {anomaly['module']} ({where})")
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


def cmd_gui(args: argparse.Namespace) -> int:
    from ghostviewer.gui.app import main as gui_main

    return gui_main(getattr(args, "path", None))


COMMANDS = {"run": cmd_run, "blocks": cmd_blocks, "demo": cmd_demo, "gui": cmd_gui}


def _quiet_libraries() -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger().setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    from ghostviewer.engine.errors import GhostError  # torch-free module

    try:
        args = build_parser().parse_args(argv)
        command = args.command or "gui"
        if command != "gui":
            _quiet_libraries()
            if getattr(args, "runs_dir", None) is None and hasattr(args, "runs_dir"):
                args.runs_dir = str(default_runs_dir())
        return COMMANDS[command](args)
    except UsageError as exc:
        print(f"ghostviewer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except GhostError as exc:
        print(f"ghostviewer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ghostviewer: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug or a pipeline crash: one line here, the traceback in the log
        from ghostviewer.engine.runner import RunFailed

        log = log_dir() / "ghostviewer-cli.log"
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv)}\n{traceback.format_exc()}\n")
        where = f"; the partial run is in {exc.run_dir}" if isinstance(exc, RunFailed) else ""
        print(f"ghostviewer: {type(exc).__name__}: {exc}{where} (details in {log})", file=sys.stderr)
        return EXIT_PROBLEM if isinstance(exc, RunFailed) else EXIT_USAGE

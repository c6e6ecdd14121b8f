"""The `ghostviewer` command (CONTRACT.md): GUI by default, headless subcommands for scripts and CI; one module per
command family beside this one, what they share in common.py.

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

from ghostviewer import gc_paused_imports
from ghostviewer.cli.audit import add_audit_parser, cmd_audit
from ghostviewer.cli.baseline import add_baseline_parser, cmd_baseline
from ghostviewer.cli.bisect import add_bisect_parser, cmd_bisect
from ghostviewer.cli.bundles import add_bundle_parsers, cmd_export, cmd_inspect
from ghostviewer.cli.common import EXIT_PROBLEM, EXIT_USAGE, Parser, UsageError
from ghostviewer.cli.doctor import add_doctor_parser, cmd_doctor
from ghostviewer.cli.env import add_env_parser, cmd_env
from ghostviewer.cli.isolate import add_isolate_parser, cmd_isolate
from ghostviewer.cli.probe import add_probe_parser, cmd_probe
from ghostviewer.cli.prune import add_prune_parser, cmd_prune
from ghostviewer.cli.record import add_record_parser, cmd_record
from ghostviewer.cli.replay import add_replay_parsers, cmd_compare, cmd_replay
from ghostviewer.cli.run import add_run_parsers, cmd_blocks, cmd_demo, cmd_run
from ghostviewer.cli.sweep import add_sweep_parser, cmd_sweep
from ghostviewer.paths import default_runs_dir, log_dir


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ghostviewer", description="Hunt intermittent bugs in diffusion pipelines.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    gui = sub.add_parser("gui", help="open the desktop app")
    gui.add_argument("path", nargs="?", help="pipeline folder, run folder, bundle or prompt list")
    add_run_parsers(sub)
    add_replay_parsers(sub)
    add_bisect_parser(sub)
    add_bundle_parsers(sub)
    add_sweep_parser(sub)
    add_isolate_parser(sub)
    add_baseline_parser(sub)
    add_doctor_parser(sub)
    add_env_parser(sub)
    add_record_parser(sub)
    add_audit_parser(sub)
    add_probe_parser(sub)
    add_prune_parser(sub)
    return parser


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
    "env": cmd_env,
    "record": cmd_record,
    "audit": cmd_audit,
    "probe": cmd_probe,
    "prune": cmd_prune,
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
    if argv is None:  # the `ghostviewer` console script: this process is ours (an in-process call passes argv)
        gc_paused_imports.own_process()
    _LOG_DIR[0] = None
    _JSON_ERRORS = "--json" in (sys.argv[1:] if argv is None else list(argv))
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code == EXIT_USAGE:  # argparse said what is wrong on stderr
                _json_error("the command line is not valid (see the message above)", EXIT_USAGE)
            raise
        command = args.command or "gui"
        if getattr(args, "runs_dir", None) == "":  # an unset variable ("$RUNS"): never the default, nor the cwd
            raise UsageError("the runs folder given is empty: name a folder (or leave --runs-dir out for the default)")
        if command != "gui":
            _quiet_libraries()
            if getattr(args, "runs_dir", None) is None and hasattr(args, "runs_dir"):
                args.runs_dir = str(default_runs_dir())
            elif getattr(args, "runs_dir", None):  # the user named where things go: the log goes there too
                _LOG_DIR[0] = Path(args.runs_dir).expanduser() / LOGS_FOLDER
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

LOGS_FOLDER = "logs"  # <runs-dir>/logs/: the CLI's log when --runs-dir is given (beside <runs-dir>/baselines/)
_LOG_DIR: list[Path | None] = [None]
_JSON_ERRORS = False  # the command asked for --json: a failure is a JSON document on stdout too (CONTRACT)


def _json_error(message: str, code: int, **extra: Any) -> None:
    if _JSON_ERRORS:
        print(json.dumps({"error": message, "exit_code": code, **extra}, ensure_ascii=True))

def _failure(message: str, code: int, **extra: Any) -> int:
    """One line on stderr, and with --json the same as {"error", "exit_code", ...} on stdout. A path or argument
    holding a line break is shown with it escaped: one line means one line."""
    message = str(message).replace("\r", "\\r").replace("\n", "\\n")
    print(f"ghostviewer: {message}", file=sys.stderr)
    _json_error(message, code, **extra)
    return code

def _internal_error(exc: BaseException) -> int:
    """One line on stderr, the traceback in the log (when the log can be written at all)."""
    # the engine's RunFailed, known by name: importing it would load torch just to report a bug of ours
    failed = any(c.__name__ == "RunFailed" and c.__module__.startswith("ghostviewer.engine.") for c in type(exc).mro())
    from ghostviewer.record.disk import disk_full_in

    full = disk_full_in(exc)  # the environment, not the pipeline: bad input's exit code (and no room for a log)
    if full is not None:
        return _failure(str(full), EXIT_USAGE)
    log: Path | None = None
    try:
        folder = _LOG_DIR[0]
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        log = (folder or log_dir()) / "ghostviewer-cli.log"
        with log.open("a", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv)}\n{traceback.format_exc()}\n")
    except OSError:
        log = None
    # Never EXIT_USAGE: the input was not at fault. A crash of ours is a problem found (1), and says so.
    what = "" if failed else "internal error (a bug of GhostViewer's): "
    where = f"; the partial run is in {exc.run_dir}" if failed else ""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    details = f" (details in {log})" if log is not None else ""
    message = f"{what}{text}{where}{details}".encode("utf-8", "backslashreplace").decode("utf-8")
    extra = {"run_dir": str(exc.run_dir)} if failed else {}
    return _failure(message, EXIT_PROBLEM, **extra)

ENGINE_SERVER_FLAG = "--engine-server"  # a frozen app runs its engine process as `<app> --engine-server`

def entry_point(argv: Sequence[str]) -> Callable[[], int]:
    """What the executable runs for these arguments: the engine server (a frozen app's engine process, started
    by ghostviewer.gui.link.engine_client from the app's own executable), else the `ghostviewer` command."""
    gc_paused_imports.own_process()
    if list(argv[:1]) == [ENGINE_SERVER_FLAG]:
        from ghostviewer.engine.server import main as engine_server_main

        return engine_server_main
    return lambda: main(list(argv))


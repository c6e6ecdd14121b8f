"""`ghostviewer record [--runs-dir DIR] [--keep all|anomalies|N] -- PROGRAM ARGS…`: run an unmodified Python program
with every diffusers pipeline call in it watched (engine/watch/program.py); the exit code is the program's own."""

from __future__ import annotations

import argparse
from typing import Any

from ghostviewer.cli.common import UsageError


def _keep(text: str) -> str | int:
    if text in ("all", "anomalies"):
        return text
    try:
        every = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--keep takes all, anomalies or a whole number N, not {text!r}") from None
    if every < 1:
        raise argparse.ArgumentTypeError(f"--keep N needs N of at least 1, not {every}")
    return every


def add_record_parser(sub: Any) -> None:
    record = sub.add_parser("record", help="run a Python program with every diffusers pipeline call in it watched",
                            description="ghostviewer record [--runs-dir DIR] [--keep all|anomalies|N] -- python "
                                        "app.py ARGS…")
    record.add_argument("--runs-dir", help="where the watch study goes")
    record.add_argument("--keep", type=_keep, default="all", metavar="all|anomalies|N",
                        help="full records for every call (default), for bad calls only, or every Nth and the bad "
                             "ones; every call leaves a summary row")
    record.add_argument("--trace-depth", default="block", choices=["block", "leaf"])
    record.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM ARGS…")


def cmd_record(args: argparse.Namespace) -> int:
    program = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:  # said before the engine (torch) is loaded
        raise UsageError("nothing to run: ghostviewer record -- python app.py ARGS… (see 'ghostviewer record --help')")
    from ghostviewer.engine.watch import run_program

    code, _summary = run_program(program, runs_dir=args.runs_dir, keep=args.keep, depth=args.trace_depth)
    return code

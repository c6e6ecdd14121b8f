"""`ghostviewer replay` and `compare`: does a run reproduce, and where do two runs part."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ghostviewer.cli.common import EXIT_OK, EXIT_PROBLEM, print_json


def add_replay_parsers(sub: Any) -> None:
    replay = sub.add_parser("replay", help="re-run a recorded run N times and say where it stops reproducing")
    replay.add_argument("run_dir", metavar="RUN_DIR")
    replay.add_argument("--times", type=int, default=1)
    replay.add_argument("--allow-pickle", action="store_true")
    replay.add_argument("--runs-dir", help="where the replay study goes (default: beside the run)")
    replay.add_argument("--json", action="store_true")
    compare = sub.add_parser("compare", help="compare two recorded runs: settings and the first divergence")
    compare.add_argument("run_a", metavar="RUN_A")
    compare.add_argument("run_b", metavar="RUN_B")
    compare.add_argument("--reference", metavar="SRC",
                         help="a known-good pipeline: re-run the suspect run's call on it (B, or A when only A looks "
                              "bad) and name where the suspect first leaves its range")
    compare.add_argument("--runs-dir", help="where the reference's run goes (default: the runs folder, as for `run`)")
    compare.add_argument("--allow-pickle", action="store_true")
    compare.add_argument("--json", action="store_true")

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
        print_json(result)
    else:
        print(f"{result['summary']} (seed {result['seed']}); study: {result['study_dir']}")
        if result["first_divergence"]:
            print(f"first divergence: run {result['first_divergence']['run']}, {_where(result['first_divergence'])}")
        for key, (a, b) in result["environment_diff"].items():
            print(f"environment differs: {key}: {a} vs {b}")
    return EXIT_OK if result["reproduced"] else EXIT_PROBLEM

def cmd_compare(args: argparse.Namespace) -> int:
    from ghostviewer import api

    result = api.compare(args.run_a, args.run_b, reference=args.reference, runs_dir=args.runs_dir,
                         allow_pickle=args.allow_pickle)
    side = result.get("reference")
    if args.json:
        print_json(result)
    else:
        print("same: every recorded output is bit-identical" if result["same"] else "the runs differ")
        for key, (a, b) in result["settings_diff"].items():
            print(f"  setting {key}: {a!r} vs {b!r}")
        if result["first_divergence"]:
            print(f"first divergence: {_where(result['first_divergence'])}")
        print(f"verdicts: {result['verdicts'][0]} vs {result['verdicts'][1]}")
        if side:
            print(f"reference: run {side['suspect'].upper()} {side['summary']}; its run: {side['run_dir']}")
    departed = bool(side and side.get("first_departure"))
    return EXIT_OK if result["same"] and not departed else EXIT_PROBLEM


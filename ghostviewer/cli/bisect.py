"""`ghostviewer bisect RUN_DIR [--settings GOOD_RUN_DIR]`: the block, or the settings, that break a run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ghostviewer.cli.common import EXIT_PROBLEM, print_json


def add_bisect_parser(sub: Any) -> None:
    bisect = sub.add_parser("bisect", help="find the block (or, with --settings, the settings) that breaks a run")
    bisect.add_argument("run_dir", metavar="RUN_DIR")
    bisect.add_argument("--settings", metavar="GOOD_RUN_DIR", help="bisect the settings against this good run")
    bisect.add_argument("--allow-pickle", action="store_true")
    bisect.add_argument("--runs-dir", help="where the bisect study goes")
    bisect.add_argument("--json", action="store_true")

def _trial_line(entry: dict[str, Any]) -> str:
    """'bypassed unet.mid_block -> nan, symptom present' (a bisection trail entry, either kind)."""
    if "bypassed" in entry:
        what = "bypassed " + ", ".join(entry["bypassed"]) if entry["bypassed"] else "re-run unchanged"
        if entry["bypassed"] and entry.get("from_step") is not None:
            what += f" from step {entry['from_step']}"
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
        elif event.get("event") == "fallback":
            start = event.get("from_step")
            print("  nothing found: bypassing " + ("whole runs" if start is None else f"from step {start}"),
                  file=sys.stderr)
        elif event.get("event") == "trial":
            print(f"  {event['role']} {event['trial']}: {_trial_line(event)}", file=sys.stderr)

    result = api.bisect(args.run_dir, args.settings, runs_dir=args.runs_dir, allow_pickle=args.allow_pickle,
                        on_progress=progress)
    if args.json:
        print_json(result)
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


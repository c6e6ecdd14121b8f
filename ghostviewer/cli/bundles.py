"""`ghostviewer export` and `inspect`: bug-report bundles, written and read (reading runs nothing from them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ghostviewer.cli.common import EXIT_OK, EXIT_PROBLEM, UsageError, is_problem, print_json, printable


def add_bundle_parsers(sub: Any) -> None:
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
    export.add_argument("--issue", action="store_true",
                        help="also write ISSUE.md: a report to paste upstream, with a diffusers-only reproduction")
    export.add_argument("--json", action="store_true")
    inspect = sub.add_parser("inspect", help="summarise a bundle (read-only: runs nothing from it)")
    inspect.add_argument("bundle", metavar="BUNDLE.zip")
    inspect.add_argument("--json", action="store_true")

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

    if not args.output.strip():  # an unset variable ("-o $OUT"): Path("") is the current folder
        raise UsageError("-o names no file: give the bundle a name such as report.zip")
    if Path(args.output).exists():  # a run's own database, a file of the user's: never overwritten
        raise UsageError(f"{args.output} already exists; GhostViewer does not overwrite it (choose another name)")
    result = api.export(
        args.run_dirs, args.output, include_tensors=not args.no_tensors, include_feature_maps=not args.no_feature_maps,
        with_inputs=args.with_inputs, on_progress=progress, allow_pickle=args.allow_pickle, issue=args.issue,
    )
    if args.json:
        print_json({"bundle": result["bundle"], "size": result["size"], "runs": result["runs"]})
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
    problem = any(is_problem(run) or run.get("status") == "failed" for run in result["runs"])
    if args.json:
        print_json(result)
        return EXIT_PROBLEM if problem else EXIT_OK
    manifest = result["manifest"]
    shown = printable  # a bundle is someone else's file: its text reaches the terminal without control codes
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


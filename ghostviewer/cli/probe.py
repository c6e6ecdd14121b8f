"""`ghostviewer probe --pipeline SRC [--prompt TEXT] [--runs-dir DIR] [--json]`: a battery of probes that need no
baseline — each compares the pipeline with itself under two settings and names the bug class a failure stands
for; the runs are a `probe` study. Exit 1 when a probe fails."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ghostviewer.cli.common import DEVICES, EXIT_OK, EXIT_PROBLEM, add_source, print_json


def add_probe_parser(sub: Any) -> None:
    from ghostviewer.engine.judge_model.probes import PROBE_NAMES

    probe = sub.add_parser("probe", help="run model-agnostic probes (prompt, seed, guidance, float16, ...)")
    add_source(probe)
    probe.add_argument("--prompt", metavar="TEXT", help="the base prompt (default: a plain caption)")
    probe.add_argument("--seed", type=int, default=0)
    probe.add_argument("--steps", type=int, default=10, help="steps of the base run (convergence: half and double)")
    probe.add_argument("--probe", dest="probes", action="append", choices=PROBE_NAMES, help="only these probes")
    probe.add_argument("--device", choices=DEVICES, default="auto")
    probe.add_argument("--runs-dir", metavar="DIR")
    probe.add_argument("--json", action="store_true")


def describe_probes(report: dict[str, Any]) -> str:
    lines = []
    for finding in report["findings"]:
        mark = "ok  " if finding["ok"] else "FAIL"
        what = finding.get("skipped") or (finding["compared"] if finding["ok"] else finding["finding"])
        lines.append(f"{mark} {finding['probe']:<18} {what}")
        if not finding["ok"]:
            evidence = finding["evidence"]
            lines.append(f"     likely: {finding['bug_class']}")
            where = evidence.get("first_departure") or evidence.get("first_divergence")
            if where:
                lines.append(f"     first parts at {where.get('module')} ({where.get('phase')}"
                             + (f" step {where['step']}" if where.get("step") is not None else "") + ")")
            lines.append(f"     evidence: {', '.join(str(r) for r in evidence.get('runs', []))}")
    lines.append(f"{len(report['failed'])} of {len(report['findings'])} probes failed; {report['runs']} runs in "
                 f"{report['elapsed_s']:.1f} s; study: {report['study_dir']}")
    return "\n".join(lines)


def cmd_probe(args: argparse.Namespace) -> int:
    from ghostviewer import api

    def show(event: dict[str, Any]) -> None:
        if event.get("event") == "probe" and not args.json:
            sys.stderr.write(f"  probing {event['probe']}\n")

    report = api.probe(args.pipeline, args.prompt, seed=args.seed, steps=args.steps, probes=args.probes,
                       device=args.device, runs_dir=args.runs_dir, allow_pickle=args.allow_pickle,
                       config=args.config, on_progress=show)
    print_json(report) if args.json else print(describe_probes(report))
    return EXIT_OK if report["ok"] else EXIT_PROBLEM

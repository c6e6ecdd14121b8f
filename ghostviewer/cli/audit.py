"""`ghostviewer audit --pipeline SRC [--reference SRC] [--json]`: the weights checked before anything runs — NaN/Inf,
beyond float16's range or close enough that a matmul overflows in float16, dead layers, and what differs from a
known-good copy, grouped by block. Exit 1 when a weight is bad."""

from __future__ import annotations

import argparse
from typing import Any

from ghostviewer.cli.common import EXIT_OK, EXIT_PROBLEM, print_json

SHOWN = 20  # findings listed in the text output (all of them in --json)


def add_audit_parser(sub: Any) -> None:
    audit = sub.add_parser("audit", help="check the weights: NaN/Inf, float16 range, dead layers, a reference")
    audit.add_argument("--pipeline", default="demo", metavar="SRC",
                       help="'demo', a diffusers folder, a .safetensors checkpoint or a cached hub id (read with "
                            "safe_open: pickle files are never opened)")
    audit.add_argument("--reference", metavar="SRC", help="a known-good copy: list every tensor that differs")
    audit.add_argument("--json", action="store_true")


def describe_audit(report: dict[str, Any]) -> str:
    lines = [f"audit of {report['source']}: {report['bytes'] / 1e6:.1f} MB of weights in "
             f"{report['elapsed_s']:.2f} s — " + ("no bad weight" if report["ok"] else f"{report['bad']} bad")]
    bad = [f for f in report["findings"] if f["kind"] != "differs"]
    for finding in bad[:SHOWN]:
        detail = finding["detail"]
        why = detail.get("why") or f"{detail.get('count')} of {detail.get('numel')} values"
        lines.append(f"  {finding['kind']:<10} {finding['component']}.{finding['tensor']}: {why}")
    if len(bad) > SHOWN:
        lines.append(f"  … and {len(bad) - SHOWN} more (see --json)")
    if report["reference"] is not None:
        if report["same_as_reference"]:
            lines.append(f"same weights as {report['reference']}")
        else:
            lines.append(f"{report['differs']} tensors differ from {report['reference']}, by block:")
            for group in report["blocks"]:
                size = "" if group["max_relative"] is None else f", up to {group['max_relative']:.3g} relative"
                reasons = f" ({'; '.join(group['reasons'])})" if group["reasons"] else ""
                lines.append(f"  {group['component']}.{group['block']}: {group['tensors']} tensors{size}{reasons}")
    for skipped in report["skipped"]:
        lines.append(f"  skipped {skipped['component']}: {skipped['reason']}")
    return "\n".join(lines)


def cmd_audit(args: argparse.Namespace) -> int:
    from ghostviewer import api

    report = api.audit(args.pipeline, reference=args.reference)
    print_json(report) if args.json else print(describe_audit(report))
    return EXIT_OK if report["ok"] else EXIT_PROBLEM

"""`ghostviewer isolate RUN_DIR --module MODULE [--step S] -o DIR [--fuzz] [--json]` (CONTRACT.md).

Writes the module's real inputs, weights, config and a standalone repro.py to DIR. Exit 1 when the isolated
output already holds NaN/Inf or, with --fuzz, when an input breaks the module; 0 otherwise; 2 for bad input
(an unknown module is named with the closest module paths).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ghostviewer.cli.common import EXIT_OK, EXIT_PROBLEM, UsageError, print_json


def add_isolate_parser(sub: Any) -> None:
    isolate = sub.add_parser("isolate", help="save a module's real inputs, weights and a standalone repro; fuzz it")
    isolate.add_argument("run_dir", metavar="RUN_DIR")
    isolate.add_argument("--module", required=True, metavar="MODULE", help="module path, e.g. unet.mid_block")
    isolate.add_argument("--step", type=int, metavar="S", help="denoising step (default: the first anomaly's, else 0)")
    isolate.add_argument("-o", "--output", required=True, metavar="DIR")
    isolate.add_argument("--fuzz", action="store_true", help="run it over varied inputs; exit 1 if one breaks it")
    isolate.add_argument("--allow-pickle", action="store_true", help="allow .bin/.ckpt/.pt weights (they can run code)")
    isolate.add_argument("--json", action="store_true")


def is_problem(result: dict[str, Any]) -> bool:
    output = result.get("output") or {}
    return bool(output.get("nan") or output.get("inf") or (result.get("fuzz") or {}).get("broken"))


def _print_text(result: dict[str, Any]) -> None:
    out = result["output"]
    where = f"step {result['step']}" if result["step"] is not None else "its first call"
    print(f"isolated {result['module']} ({result['class'].rpartition('.')[2]}) at {where} -> {result['out_dir']}")
    print(f"  output: NaN {out['nan']}, Inf {out['inf']}, std {out['std']}")
    if result["repro"]:
        print(f"  repro:  python {result['repro']}  (rebuilt by {result['rebuilt_by']})")
    else:
        print(f"  no repro: the module cannot be rebuilt from a config ({result['reason']})")
    for name in result["faults"]:
        print(f"  injected fault: {name} (a GhostViewer ghost-lab fault, written into repro.py as such)")
    if result.get("missing_user_code"):
        print(f"  note: {result['missing_user_code']}")
    fuzz = result.get("fuzz")
    if fuzz:
        print(f"  fuzz: {fuzz['broken']} of {fuzz['total']} cases broken ({fuzz['skipped']} skipped)")
        for vary, values in fuzz["broken_values"].items():
            print(f"    {vary}: {', '.join(str(v) for v in values)}")


def cmd_isolate(args: argparse.Namespace) -> int:
    from ghostviewer import api

    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):  # the user's files: never overwritten
        raise UsageError(f"{out} already exists and is not an empty folder; GhostViewer does not overwrite it "
                         "(choose another folder)")
    result = api.isolate(args.run_dir, module=args.module, step=args.step, out=args.output, fuzz=args.fuzz,
                         allow_pickle=args.allow_pickle)
    if args.json:
        print_json(result)
    else:
        _print_text(result)
    return EXIT_PROBLEM if is_problem(result) else EXIT_OK

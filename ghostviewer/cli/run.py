"""`ghostviewer run`, `blocks` and `demo`: one traced run, a pipeline's blocks, the demo and its ghost lab."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ghostviewer.cli.common import (
    EXIT_OK,
    EXIT_PROBLEM,
    add_source,
    add_spec_options,
    describe_run,
    is_problem,
    print_json,
    progress_printer,
    spec_values,
)
from ghostviewer.spec import DEFAULTS, RunSpec

RUN_FLAGS = ("--negative", "--seed", "--steps", "--guidance", "--width", "--height", "--scheduler", "--dtype",
             "--device", "--bypass", "--capture", "--fault", "--trace-depth", "--capture-attention",
             "--init-image", "--strength", "--mask", "--batch", "--generator-device", "--control-image",
             "--controlnet", "--controlnet-scale", "--lora", "--fuse-lora", "--attention-backend")
DEMO_PROMPT = "a red circle on a blue background, top left"


def add_run_parsers(sub: Any) -> None:
    blocks = sub.add_parser("blocks", help="list a pipeline's blocks and whether they can be bypassed")
    add_source(blocks)
    blocks.add_argument("--json", action="store_true")

    run = sub.add_parser("run", help="run a prompt, traced and recorded")
    add_source(run)
    run.add_argument("--prompt", required=True)
    add_spec_options(run, RUN_FLAGS)
    run.add_argument("--runs-dir")
    run.add_argument("--no-memory-check", action="store_true", help="run a size the memory estimate refuses")
    run.add_argument("--reference", metavar="SRC",
                     help="a known-good pipeline: run the same call on it and name where this one leaves its range")
    run.add_argument("--baseline", metavar="FILE",
                     help="judge against this baseline file (default: the exact one, else the nearest of the same "
                          "architecture)")
    run.add_argument("--check-batch-variance", action="store_true",
                     help="with --batch N: make each image again alone from its share of the batch's noise and name "
                          "those that differ beyond float noise (exit 1)")
    run.add_argument("--json", action="store_true")

    demo = sub.add_parser("demo", help="generate a demo image, or list the ghost lab's fault presets")
    demo.add_argument("--list-faults", action="store_true")
    demo.add_argument("--prompt", default=DEMO_PROMPT)
    demo.add_argument("--seed", type=int, default=DEFAULTS.seed)
    demo.add_argument("--runs-dir")
    demo.add_argument("--json", action="store_true")


def cmd_run(args: argparse.Namespace) -> int:
    from ghostviewer import api

    spec = RunSpec(prompt=args.prompt, **spec_values(args, RUN_FLAGS),
                   extra={"memory_check": False} if args.no_memory_check else {})
    result = api.run_spec(args.pipeline, spec, runs_dir=args.runs_dir, allow_pickle=args.allow_pickle,
                          config=args.config, on_progress=progress_printer(quiet=not sys.stderr.isatty()),
                          reference=args.reference, baseline=args.baseline,
                          check_batch_variance=args.check_batch_variance)
    if args.json:
        print_json(result)
    else:
        print(describe_run(result))
        judged_by = result.get("baseline")
        if judged_by is not None and judged_by.get("match") != "exact":
            print(f"baseline: {judged_by['file']} ({judged_by['match']}): {'; '.join(judged_by['differences'])}")
        if result.get("reference"):
            print(f"reference: {result['reference']['summary']}")
        for finding in _findings(result):
            print(f"finding: {finding}")
    departed = bool((result.get("reference") or {}).get("first_departure"))
    varies = bool((result.get("batch_variance") or {}).get("differ"))  # asked for: a check that fails is exit 1
    return EXIT_PROBLEM if is_problem(result) or departed or varies else EXIT_OK


# the run log's findings worth a line of their own (the control had no effect; a LoRA had none, or was left loaded;
# a prompt cut by its tokenizer; a batch whose images differ from the same noise made alone, or the check's note)
FINDING_KINDS = ("control", "lora", "prompt_truncated", "batch_variance", "batch_variance_checked")


def _findings(result: dict[str, Any]) -> list[str]:
    if not result.get("run_dir"):
        return []
    from ghostviewer.record import RecordError, RunRecord

    try:
        record = RunRecord(result["run_dir"])
        return [e.message for kind in FINDING_KINDS for e in record.events(kind=kind)]
    except RecordError:
        return []


def cmd_blocks(args: argparse.Namespace) -> int:
    from ghostviewer import api

    result = api.blocks(args.pipeline, allow_pickle=args.allow_pickle, config=args.config)
    if args.json:
        print_json(result)
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
            print_json(result)
        else:
            for fault in result["faults"]:
                print(f"{fault['name']:<26} {fault['description']}")
        return EXIT_OK
    result = api.run("demo", args.prompt, seed=args.seed, runs_dir=args.runs_dir)
    print_json(result) if args.json else print(result["image"])
    return EXIT_PROBLEM if is_problem(result) else EXIT_OK


"""`ghostviewer sweep LIST_FILE`: prompts × seeds, traced and judged, recorded as a sweep study (CONTRACT.md).

Exit 0 when every run is healthy, 1 when any run failed (bad verdict or a first anomaly), 2 for a malformed
list (one line naming the file and line), a bad seed spec or another usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ghostviewer.cli.common import (
    EXIT_OK,
    EXIT_PROBLEM,
    SPEC_OPTIONS,
    UsageError,
    add_source,
    add_spec_options,
    flag_of,
    print_json,
)
from ghostviewer.spec import DEFAULTS
from ghostviewer.spec.prompt_lists import ListOptions
from ghostviewer.spec.templates import TemplateOptions

SWEEP_FLAGS = ("--steps", "--guidance", "--negative", "--scheduler", "--dtype", "--device", "--fault", "--bypass")
DEFAULT_SEEDS = "0-9"


def _default(flag: str) -> Any:
    value = getattr(DEFAULTS, SPEC_OPTIONS[flag][0])
    return list(value) if isinstance(value, tuple) else value


def add_sweep_parser(sub: Any) -> None:

    sweep = sub.add_parser("sweep", help="run every prompt of a list with every seed; failure rates per prompt")
    sweep.add_argument("list_file", metavar="LIST_FILE", nargs="?",
                       help=".txt (one prompt a line, # comments), .csv, .jsonl or .json")
    add_source(sweep)
    sweep.add_argument("--seeds", default=DEFAULT_SEEDS, metavar="SPEC", help="0-99, 1,5,9 or a mix (default 0-9)")
    add_spec_options(sweep, SWEEP_FLAGS)
    lists = sweep.add_argument_group("prompt lists as A1111 and dynamic prompts write them")
    lists.add_argument("--style", action="append", default=[], metavar="NAME",
                       help="apply this A1111 style to every row (repeatable; needs --styles-file)")
    lists.add_argument("--styles-file", metavar="FILE", help="an A1111 styles.csv (name, prompt, negative_prompt)")
    lists.add_argument("--template-mode", choices=["combinatorial", "random"], default="combinatorial",
                       help="dynamic-prompt templates: every variant (default), or --variants random ones")
    lists.add_argument("--variants", type=int, metavar="N",
                       help="random mode: variants a template (default 1); combinatorial: a cap")
    lists.add_argument("--template-seed", type=int, default=0, metavar="S", help="random mode's expansion seed")
    lists.add_argument("--wildcards", metavar="DIR",
                       help="the __wildcard__ folder (default: wildcards/ beside the list)")
    lists.add_argument("--allow-outside-files", action="store_true",
                       help="let the list name images and LoRAs outside its own folder (refused by default: a list "
                            "from someone else could read your files into the runs and their bug reports)")
    sweep.add_argument("--ray", metavar="auto|local|ADDRESS",
                       help="run on Ray actors: 'auto' joins the running cluster (else starts one here), "
                       "'local' starts one here, or give a cluster address; --runs-dir must be shared by all nodes")
    sweep.add_argument("--fingerprints", action="store_true",
                       help="record bit-level fingerprints in every run (off: same verdicts and first anomalies, "
                            "~5 %% faster; the runs compare with others by their statistics)")
    sweep.add_argument("--resume", metavar="STUDY_DIR", help="finish a sweep study, skipping the runs it recorded")
    sweep.add_argument("--runs-dir")
    sweep.add_argument("--json", action="store_true")


def _progress(quiet: bool):
    def show(event: dict[str, Any]) -> None:
        if quiet or event.get("event") != "sweep_progress":
            return
        mark = "FAIL" if event["failed"] else "ok  "
        eta = time.strftime("%H:%M:%S", time.gmtime(event["eta"] or 0))
        sys.stderr.write(f"  [{event['done']:>5}/{event['total']}] {mark} seed {event['seed']:<6} "
                         f"{event['verdict'] or '-':<10} {event['rate']:.2f} runs/s, {eta} left  "
                         f"{event['prompt'][:50]!r}\n")

    return show


def describe_sweep(result: dict[str, Any]) -> str:
    lines = [f"{result['summary']}; study: {result['study_dir']}"]
    width = max((len(p) for p in result["failure_rate"]), default=10)
    for prompt, rate in result["failure_rate"].items():
        lines.append(f"  {prompt[:60]:<{min(width, 60)}}  {100 * rate:5.1f} %")
    bad_seeds = [seed for seed, rate in result["failure_rate_by_seed"].items() if rate > 0]
    if bad_seeds:
        lines.append(f"seeds with failures: {', '.join(bad_seeds)}")
    for module, count in result["first_anomaly_modules"].items():
        lines.append(f"first anomaly in {module}: {count} run(s)")
    if result.get("status") == "cancelled":
        lines.append(f"cancelled: resume with --resume {result['study_dir']}")
    return "\n".join(lines)


# Options whose values a resumed sweep takes from its record (their defaults here mean "not given"), by dest.
RECORDED_BY_THE_SWEEP = {"seeds": DEFAULT_SEEDS, **{SPEC_OPTIONS[flag][0]: _default(flag) for flag in SWEEP_FLAGS},
                         "fingerprints": False, "style": [], "styles_file": None, "template_mode": "combinatorial",
                         "variants": None, "template_seed": 0, "wildcards": None,
                         "allow_outside_files": False}


def _list_options(args: argparse.Namespace) -> ListOptions:
    return ListOptions(
        styles_file=Path(args.styles_file) if args.styles_file else None, styles=tuple(args.style),
        templates=TemplateOptions(mode=args.template_mode, count=args.variants, seed=args.template_seed,
                                  wildcards=Path(args.wildcards) if args.wildcards else None),
        outside_files=args.allow_outside_files)


def cmd_sweep(args: argparse.Namespace) -> int:
    from ghostviewer import api

    if args.list_file is None and args.resume is None:
        raise UsageError("a LIST_FILE is needed (or --resume STUDY_DIR) (see 'ghostviewer sweep --help')")
    if args.resume is not None:
        given = [flag_of(name) for name, default in RECORDED_BY_THE_SWEEP.items() if getattr(args, name) != default]
        if given:  # silently running the recorded values instead would not be what the user asked for
            raise UsageError(f"--resume finishes the sweep with the seeds and settings it recorded; {', '.join(given)} "
                             "would change them: start a new sweep for other settings")
    result = api.sweep(
        args.list_file, args.seeds, source=args.pipeline, steps=args.steps, faults=args.faults, bypass=args.bypass,
        resume=args.resume, ray=args.ray, runs_dir=args.runs_dir, guidance=args.guidance, negative=args.negative_prompt,
        scheduler=args.scheduler, dtype=args.dtype, device=args.device, config=args.config,
        allow_pickle=args.allow_pickle, fingerprints=args.fingerprints,
        on_progress=_progress(quiet=args.json and not sys.stderr.isatty()), list_options=_list_options(args),
    )
    print_json(result) if args.json else print(describe_sweep(result))
    return EXIT_PROBLEM if result["failed"] else EXIT_OK

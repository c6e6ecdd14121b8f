"""`ghostviewer baseline build`: a pipeline's healthy envelope from prompts × seeds (a `baseline` study).

The baseline is written to `<runs-dir>/baselines/<key>.json`, where `ghostviewer run` (and the GUI's engine)
find it for runs of the same pipeline, kind of call and settings (`--init-image`, `--mask`, `--control-image`,
`--lora`, … as for `run`; or a list's init_image, strength, mask, control_image, lora). Exit 0 when it was built,
2 for usage errors (no prompts for a pipeline other than the demo, a bad seed spec, a missing or unreadable image, a
mask without an init image, a strength that gives no step, entries of different kinds, a pipeline without weight
hashes, no healthy run).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ghostviewer.cli.common import EXIT_OK, Parser, add_source, add_spec_options, print_json, spec_values

# The call every run of the build makes, as `run` spells it (cli/common.py SPEC_OPTIONS); a list's entries may name
# init_image, strength, mask, control_image and lora themselves.
CALL_FLAGS = ("--init-image", "--strength", "--mask", "--control-image", "--controlnet", "--controlnet-scale",
              "--lora", "--fuse-lora", "--batch")


def add_baseline_parser(sub: Any) -> None:

    baseline = sub.add_parser("baseline", help="build a pipeline's healthy baseline (drift and colour ranges)")
    actions = baseline.add_subparsers(dest="baseline_command", parser_class=Parser, required=True)
    build = actions.add_parser("build", help="run healthy prompts × seeds and write the baseline beside the runs")
    add_source(build, required=True)
    build.add_argument("--prompts", metavar="LIST", help="a prompt list (.txt, .csv, .jsonl, .json); "
                       "default for the demo pipeline: its own 24 prompts")
    build.add_argument("--allow-outside-files", action="store_true",
                       help="let the list name images and LoRAs outside its own folder (refused by default)")
    build.add_argument("--seeds", default="0-9", metavar="SPEC", help="0-99, 1,5,9 or a mix (default 0-9)")
    add_spec_options(build, ("--steps", "--guidance", "--width", "--height", "--scheduler", "--dtype", "--device"))
    add_spec_options(build.add_argument_group("the call (img2img, inpaint, ControlNet, LoRAs, batches), as for run"),
                     CALL_FLAGS)
    build.add_argument("--pairing", default="product", choices=["product", "zip"],
                       help="every prompt with every seed (default), or the i-th prompt with the i-th seed")
    build.add_argument("--runs-dir")
    build.add_argument("--json", action="store_true")


def _progress(quiet: bool):
    def show(event: dict[str, Any]) -> None:
        if quiet or event.get("event") != "baseline_run":
            return
        sys.stderr.write(f"\r  run {event['done']:>4}/{event['total']} {event['verdict'] or '-':<10}")
        if event["done"] == event["total"]:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def cmd_baseline(args: argparse.Namespace) -> int:
    from ghostviewer import api
    from ghostviewer.spec.prompt_lists import ListOptions, read_prompt_list

    prompts = args.prompts
    if prompts and args.allow_outside_files:  # read here, allowed; the rows then name their files as paths
        prompts = read_prompt_list(prompts, ListOptions(outside_files=True))
    result = api.baseline(
        args.pipeline, prompts, args.seeds, steps=args.steps, guidance=args.guidance, width=args.width,
        height=args.height, scheduler=args.scheduler, dtype=args.dtype, device=args.device, pairing=args.pairing,
        runs_dir=args.runs_dir, allow_pickle=args.allow_pickle, config=args.config,
        on_progress=_progress(quiet=args.json or not sys.stderr.isatty()), **spec_values(args, CALL_FLAGS),
    )
    if args.json:
        print_json(result)
    else:
        print(f"baseline: {result['baseline']}")
        print(f"from {result['healthy']} healthy runs of {result['runs']} ({len(result['excluded'])} left out), "
              f"{result['modules']} module envelopes, {result['elapsed_s']:.0f} s; study: {result['study_dir']}")
    return EXIT_OK

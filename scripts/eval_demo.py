#!/usr/bin/env python
"""Check that the demo pipeline draws what it is asked, on caption combinations it never saw in training.

Prints background-colour, shape-colour, shape and position accuracy over held-out combinations × seeds, the
shape classifier's own accuracy on ground-truth drawings, and writes a README grid of ~12 prompts and images.

Usage: python scripts/eval_demo.py [--pipeline resources/demo-pipeline] [--combos 30] [--seeds 0 1]
                                   [--grid resources/readme/demo-grid.png] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ghostviewer.demo import shapes
from ghostviewer.demo.shape_check import shape_classifier_accuracy
from ghostviewer.engine.loading.demo_model.evaluate import evaluate_demo


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pipeline", type=Path, default=Path("resources/demo-pipeline"))
    p.add_argument("--combos", type=int, default=30, help="held-out combinations (at most 30)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--grid", type=Path, default=Path("resources/readme/demo-grid.png"))
    p.add_argument("--no-grid", action="store_true")
    p.add_argument("--json", type=Path, help="also write the per-image rows here")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    if not (args.pipeline / "model_index.json").exists():
        print(f"no pipeline at {args.pipeline} (train it with scripts/train_demo.py)", file=sys.stderr)
        return 2
    from diffusers import DiffusionPipeline

    classifier = shape_classifier_accuracy(count=200)
    print(f"shape classifier on 200 ground-truth drawings: {classifier['accuracy']:.1%}"
          + (f" (misses: {classifier['confusions']})" if classifier["confusions"] else ""))

    pipe = DiffusionPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    combos = shapes.held_out_combos()[: args.combos]
    t0 = time.time()
    result = evaluate_demo(pipe, combos, seeds=args.seeds, steps=args.steps,
                           grid_path=None if args.no_grid else args.grid)
    n = result["images"]
    print(f"{n} images ({len(combos)} held-out combinations × {len(args.seeds)} seeds, {args.steps} steps) "
          f"in {time.time() - t0:.0f} s")
    for key in ("background", "foreground", "shape", "position"):
        rate = result[f"{key}_accuracy"]
        print(f"  {key + ' accuracy':<22} {rate:6.1%}  ({round(rate * n)}/{n})")
    print(f"  shape by kind          {result['shape_by_kind']}")
    print(f"  bad verdicts           {result['bad_verdicts']}")
    misses = [r for r in result["rows"] if not (r["background_ok"] and r["foreground_ok"])]
    for r in misses:
        print(f"  colour miss: {r['prompt']!r} seed {r['seed']} → bg {r['read_background']}, "
              f"fg {r['read_foreground']}")
    if "grid" in result:
        size = Path(result["grid"]).stat().st_size
        print(f"grid: {result['grid']} ({size / 1024:.0f} KB)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

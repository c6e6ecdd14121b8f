#!/usr/bin/env python
"""Calibrate the verdict thresholds (ghostviewer/analysis/verdicts.py) on healthy runs of the demo pipeline.

Runs the demo pipeline once per shape × colour × background combination (280 runs by default: 20 DDIM steps,
64×64, guidance 7.5, positions cycling, seed = the run's index), prints each score's spread over the healthy
runs and the false alarms (there must be none), then the labels the synthetic ghosts get. Exit 0 when healthy
runs are all 'ok' and every ghost gets its label, 1 otherwise.

Usage: python scripts/calibrate_verdicts.py [--pipeline resources/demo-pipeline] [--runs 280]
                                            [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ghostviewer.analysis.verdicts import SCORES, THRESHOLDS, image_verdict
from ghostviewer.demo import shapes

# Which side of each threshold is healthy: blank is flagged *below* its std threshold, the rest above.
_THRESHOLD_OF = {"nan_fraction": "nan_fraction", "std": "blank_std", "noise": "noise",
                 "saturated": "saturated", "color_cast": "color_cast"}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pipeline", type=Path, default=Path("resources/demo-pipeline"))
    p.add_argument("--runs", type=int, default=len(shapes.all_combos()), help="healthy runs (≥ 100)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--guidance", type=float, default=7.5)
    p.add_argument("--json", type=Path, help="also write every healthy run's scores here")
    return p.parse_args()


def healthy_prompts(count: int) -> list[tuple[str, int, tuple[str, str, str]]]:
    """(prompt, seed, combo): every combination once, then again with other seeds, positions cycling."""
    combos = shapes.all_combos()
    positions = [None, *shapes.POSITIONS]
    out = []
    for i in range(count):
        shape, colour, background = combos[i % len(combos)]
        position = positions[i % len(positions)]
        out.append((shapes.caption(shape, colour, background, position), i, (shape, colour, background)))
    return out


Healthy = list[tuple[tuple[str, str, str], np.ndarray]]


def synthetic_ghosts(healthy: Healthy) -> list[tuple[str, str, np.ndarray]]:
    """(name, expected label, image) for each synthetic ghost."""
    rng = np.random.default_rng(0)
    side = shapes.SIZE
    white_bg = [img for combo, img in healthy if combo[2] == "white"]
    bright_bg = [img for combo, img in healthy if combo[2] in ("white", "yellow", "orange")]
    ghosts = [
        ("all black", "blank", np.zeros((side, side, 3))),
        ("all NaN", "nan", np.full((side, side, 3), np.nan)),
        ("one NaN pixel", "nan", _with_nan(healthy[0][1])),
        ("uniform gray", "blank", np.full((side, side, 3), 0.5)),
        ("Gaussian static", "noise", np.clip(rng.normal(0.5, 0.25, (side, side, 3)), 0, 1)),
        ("blotchy static (4×4 blocks)", "noise",
         np.clip(np.kron(rng.normal(0.5, 0.25, (side // 4, side // 4, 3)), np.ones((4, 4, 1))), 0, 1)),
    ]
    for img in white_bg[:5]:
        ghosts.append(("healthy (white bg) − 0.5 on red", "color_cast", np.clip(img - [0.5, 0, 0], 0, 1)))
    for img in white_bg[5:10]:
        ghosts.append(("healthy (white bg) blended 50 % toward blue", "color_cast",
                       0.5 * img + 0.5 * np.array([0.1, 0.2, 1.0])))
    for img in bright_bg[:5]:
        ghosts.append(("healthy (bright bg) × 4, clipped", "saturated", np.clip(img * 4, 0, 1)))
    return ghosts


def _with_nan(image: np.ndarray) -> np.ndarray:
    out = image.copy()
    out[10, 10, 1] = np.nan
    return out


def main() -> int:
    args = parse_args()
    if not (args.pipeline / "model_index.json").exists():
        print(f"no pipeline at {args.pipeline} (train it with scripts/train_demo.py)", file=sys.stderr)
        return 2
    import torch
    from diffusers import DiffusionPipeline
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.disable_progress_bar()
    pipe = DiffusionPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)

    jobs = healthy_prompts(args.runs)
    healthy: Healthy = []
    records = []
    t0 = time.time()
    for prompt, seed, combo in jobs:
        with torch.no_grad():
            image = pipe(prompt, num_inference_steps=args.steps, guidance_scale=args.guidance,
                         height=shapes.SIZE, width=shapes.SIZE, output_type="np",
                         generator=torch.Generator().manual_seed(seed)).images[0]
        verdict = image_verdict(image)
        healthy.append((combo, np.asarray(image, dtype=np.float64)))
        records.append({"prompt": prompt, "seed": seed, **verdict})
    print(f"{len(records)} healthy runs ({args.steps} steps, 64×64, guidance {args.guidance}) "
          f"in {time.time() - t0:.0f} s")

    print("\nscore         min      p1      p50      p99      max   threshold  (healthy extreme at)")
    for name in SCORES:
        values = np.array([r["scores"][name] for r in records])
        key = _THRESHOLD_OF[name]
        worst = int(values.argmin() if name == "std" else values.argmax())
        p1, p50, p99 = np.percentile(values, [1, 50, 99])
        print(f"{name:<12} {values.min():7.4f} {p1:7.4f} {p50:8.4f} {p99:8.4f} {values.max():8.4f}"
              f"   {key}={getattr(THRESHOLDS, key):<6}  {records[worst]['prompt']!r} "
              f"seed {records[worst]['seed']}")

    alarms = [r for r in records if r["label"] != "ok"]
    print(f"\nfalse alarms on healthy runs: {len(alarms)} / {len(records)}")
    for r in alarms:
        print(f"  {r['label']:<10} {r['prompt']!r} seed {r['seed']} {r['scores']}")

    print("\nsynthetic ghosts:")
    wrong = 0
    for name, expected, image in synthetic_ghosts(healthy):
        verdict = image_verdict(image)
        ok = verdict["label"] == expected
        wrong += not ok
        shown = {k: float(f"{v:.3g}") for k, v in verdict["scores"].items()}
        print(f"  {'ok ' if ok else 'BAD'} {name:<45} → {verdict['label']:<10} {shown}")

    print("\ncoverage of milder ghosts over every healthy run (informative):")
    for name, transform in [
        ("− 0.5 on red", lambda im: np.clip(im - [0.5, 0, 0], 0, 1)),
        ("blend 50 % toward blue", lambda im: 0.5 * im + 0.5 * np.array([0.1, 0.2, 1.0])),
        ("× 4, clipped", lambda im: np.clip(im * 4, 0, 1)),
        ("× 0.25 (dim)", lambda im: im * 0.25),
    ]:
        labels = Counter(image_verdict(transform(img))["label"] for _, img in healthy)
        print(f"  {name:<24} {dict(labels)}")

    if args.json:
        args.json.write_text(json.dumps(records, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return 0 if not alarms and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""How fast is the embedded demo pipeline? 20 steps at 64×64 with CFG, median of 10 runs per scheduler.

Usage: python benchmarks/demo_speed.py [--pipeline resources/demo-pipeline] [--runs 10] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

GOAL_S = 1.0
PROMPT = "a red circle on a blue background, top left"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Path(__file__).resolve().parents[1] / "resources" / "demo-pipeline"
    p.add_argument("--pipeline", type=Path, default=default)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    return p.parse_args()


def main() -> int:
    args = parse_args()
    if not (args.pipeline / "model_index.json").exists():
        print(f"no pipeline at {args.pipeline} (train it with scripts/train_demo.py)", file=sys.stderr)
        return 2
    import torch
    from diffusers import DiffusionPipeline, DPMSolverMultistepScheduler, EulerDiscreteScheduler

    from ghostviewer.analysis.verdicts import image_verdict

    t0 = time.perf_counter()
    pipe = DiffusionPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    print(f"loaded {args.pipeline.name} in {time.perf_counter() - t0:.2f} s "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)")

    default = pipe.scheduler
    schedulers = [
        (type(default).__name__.replace("Scheduler", ""), default),
        ("Euler", EulerDiscreteScheduler.from_config(default.config)),
        ("DPM++", DPMSolverMultistepScheduler.from_config(default.config)),
    ]
    for name, scheduler in schedulers:
        pipe.scheduler = scheduler
        times = []
        for i in range(args.runs + 2):  # two warm-up runs
            start = time.perf_counter()
            with torch.no_grad():
                image = pipe(PROMPT, num_inference_steps=args.steps, guidance_scale=7.5, height=64, width=64,
                             output_type="np", generator=torch.Generator().manual_seed(i)).images[0]
            if i >= 2:
                times.append(time.perf_counter() - start)
        median = statistics.median(times)
        label = "demo" if scheduler is default else f"demo {name}"
        print(f"{label} {args.steps} steps 64x64: median {median:.2f} s "
              f"(min {min(times):.2f}, max {max(times):.2f}; goal ≤ {GOAL_S:.1f} s)"
              + (f" [{name}]" if scheduler is default else "")
              + f"; last image's verdict: {image_verdict(image)['label']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""False alarms of the verdict and the first-anomaly detector over healthy demo runs (goal: zero).

Runs the traced demo pipeline over prompts × seeds (default 25 × 4 = 100 runs) and counts runs whose verdict is
not 'ok' or that report a first anomaly. Prints each false alarm, the counts, and the worst verdict scores.

Usage: python benchmarks/false_alarms.py [--prompts 25] [--seeds 4]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from ghostviewer.demo import shapes
from ghostviewer.engine.loading import load_pipeline
from ghostviewer.engine.runner import execute_run
from ghostviewer.engine.settings import RunSettings


def healthy_prompts(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    combos = shapes.all_combos()
    positions = [None, *shapes.POSITIONS]
    return [shapes.caption(*rng.choice(combos), rng.choice(positions)) for _ in range(count)]


def count_false_alarms(prompts: list[str], seeds: list[int], runs_dir: Path, loaded=None) -> dict:
    loaded = loaded or load_pipeline("demo", device="cpu")
    alarms, worst = [], {}
    for prompt in prompts:
        for seed in seeds:
            result = execute_run(loaded, RunSettings(prompt=prompt, seed=seed), runs_dir)
            for key, value in result["verdict"]["scores"].items():
                worst[key] = max(worst.get(key, 0.0), value)
            if result["verdict"]["label"] != "ok" or result["first_anomaly"] is not None:
                alarms.append({"prompt": prompt, "seed": seed, "verdict": result["verdict"]["label"],
                               "first_anomaly": result["first_anomaly"]})
    return {"runs": len(prompts) * len(seeds), "false_alarms": alarms, "worst_scores": worst}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=25)
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = count_false_alarms(healthy_prompts(args.prompts), list(range(args.seeds)), Path(tmp))
    for alarm in report["false_alarms"]:
        print(f"  FALSE ALARM {alarm}")
    print(f"healthy demo runs: {report['runs']}, false alarms: {len(report['false_alarms'])}")
    print("worst verdict scores over healthy runs: "
          + ", ".join(f"{k}={v:.4f}" for k, v in sorted(report["worst_scores"].items())))


if __name__ == "__main__":
    main()

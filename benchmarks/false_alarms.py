#!/usr/bin/env python
"""False alarms of the verdict and the first-anomaly detector over healthy demo runs (goal: zero).

Runs the traced demo pipeline over prompts × seeds (default 25 × 4 = 100 runs, seeds 1000-1003) and counts runs
whose verdict is not 'ok' (off_prompt and the baseline's color_cast included) or that report a first anomaly
(drift included). The runs use the demo's shipped baseline (resources/baselines/), which was built from other
prompts (ghostviewer.demo.baseline_prompts) and seeds 0-239: none of these runs helped build it. Prints each
false alarm, the counts, the worst verdict scores, and how close the healthy runs came to each drift margin
(the worst excess beyond the healthy extremes, in robust scale units, against the margin).

Usage: python benchmarks/false_alarms.py [--prompts 25] [--seeds 4] [--first-seed 1000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ghostviewer.analysis.baseline_build import worst_excess
from ghostviewer.analysis.baseline_store import recorded_channel_means
from ghostviewer.demo import shapes
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.run.baseline_lookup import find_baseline
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec


def healthy_prompts(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    combos = shapes.all_combos()
    positions = [None, *shapes.POSITIONS]
    return [shapes.caption(*rng.choice(combos), rng.choice(positions)) for _ in range(count)]


def _headroom(result: dict[str, Any], baseline: Any, worst: dict[str, tuple[float, str]]) -> None:
    record = RunRecord(result["run_dir"])
    channels = recorded_channel_means(record)
    image = np.asarray(Image.open(result["image"]).convert("RGB")) if result["image"] else None
    for check, (value, where) in worst_excess(baseline, record.stats(), channels, image).items():
        if value >= worst.get(check, (-1.0, ""))[0]:
            worst[check] = (value, where)


def count_false_alarms(prompts: list[str], seeds: list[int], runs_dir: Path, loaded=None) -> dict:
    """{"runs", "false_alarms", "worst_scores", "baselines" (which one each run used), "headroom"}."""
    loaded = loaded or load_pipeline("demo", device="cpu")
    alarms, worst = [], {}
    baselines: set[str | None] = set()
    headroom: dict[str, tuple[float, str]] = {}
    for prompt in prompts:
        for seed in seeds:
            result = execute_run(loaded, RunSpec(prompt=prompt, seed=seed), runs_dir)
            for key, value in result["verdict"]["scores"].items():
                worst[key] = max(worst.get(key, 0.0), value)
            if result["verdict"]["label"] != "ok" or result["first_anomaly"] is not None:
                alarms.append({"prompt": prompt, "seed": seed, "verdict": result["verdict"]["label"],
                               "reason": result["verdict"].get("reason"), "first_anomaly": result["first_anomaly"]})
            record = RunRecord(result["run_dir"])
            events = [e for e in record.events() if e.kind == "baseline"]
            key = events[0].data.get("baseline") if events else None
            baselines.add(key)
            if key is not None:
                _headroom(result, find_baseline(loaded, record.settings, runs_dir), headroom)
    return {"runs": len(prompts) * len(seeds), "false_alarms": alarms, "worst_scores": worst,
            "baselines": sorted(str(b) for b in baselines), "headroom": headroom}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=25)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=1000)
    args = parser.parse_args()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    with tempfile.TemporaryDirectory() as tmp:
        report = count_false_alarms(healthy_prompts(args.prompts), seeds, Path(tmp))
    for alarm in report["false_alarms"]:
        print(f"  FALSE ALARM {alarm}")
    print(f"healthy demo runs: {report['runs']}, false alarms: {len(report['false_alarms'])}")
    print(f"baselines used: {', '.join(report['baselines'])}")
    print("worst verdict scores over healthy runs: "
          + ", ".join(f"{k}={v:.4f}" for k, v in sorted(report["worst_scores"].items())))
    for check, (value, where) in sorted(report["headroom"].items()):
        print(f"worst {check} excess beyond the healthy extremes: {value:.2f} scale units ({where})")


if __name__ == "__main__":
    main()

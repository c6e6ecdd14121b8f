#!/usr/bin/env python
"""Build the demo pipeline's shipped baseline (resources/baselines/<key>.json) at its default settings.

240 healthy runs by default: the prompts of ghostviewer.demo.baseline_prompts (full captions, captions without a
position or with a size word, "a red circle", "red circle", "a circle on a blue background"), each with its own
seed (0-239), 20 DDIM steps, 64×64, guidance 7.5, float32, on the CPU. Runs judged unhealthy (the demo leaves
some two-word prompts blank) are left out. Prints the build time and the file's size (it must stay ≤ 1 MB).
The held-out check is benchmarks/false_alarms.py (other prompts, seeds 1000+).

Usage: python scripts/build_demo_baseline.py [--runs 240] [--out resources/baselines]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ghostviewer.demo.baseline_prompts import baseline_prompts
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.loops.baseline_build import build_baseline

MAX_BYTES = 1 << 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=240)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "resources" / "baselines")
    args = parser.parse_args()
    loaded = load_pipeline("demo", device="cpu")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = build_baseline(loaded, baseline_prompts(args.runs), list(range(args.runs)), Path(tmp),
                                pairing="zip")
        args.out.mkdir(parents=True, exist_ok=True)
        target = args.out / Path(result["baseline"]).name
        shutil.copyfile(result["baseline"], target)
    size = target.stat().st_size
    print(f"baseline {target} ({size / 1024:.0f} KiB): {result['healthy']} healthy runs of {result['runs']}, "
          f"{result['modules']} module envelopes, built in {time.perf_counter() - started:.0f} s")
    for item in result["excluded"]:
        print(f"  left out: {item['prompt']!r} seed {item['seed']} ({item['verdict']})")
    if size > MAX_BYTES:
        print(f"the baseline is larger than {MAX_BYTES} bytes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

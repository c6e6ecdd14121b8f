#!/usr/bin/env python
"""A replay loop of N re-runs against N plain diffusers calls, side by side in one process (this machine is noisy).

Each round times `replay_run(run, N)` — N traced, recorded re-runs, each compared output by output with the
original — and N plain `pipe(...)` calls with the same prompt and seed, in alternating order, and prints the
median of each and their ratio. The replay's extra cost is tracing, recording and the comparison.

Usage: python benchmarks/replay_speed.py [--times 20] [--rounds 3] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ghostviewer import api
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.loops.replay import replay_run

PROMPT = "a red circle on a blue background"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--times", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = load_pipeline("demo", device="cpu")
    plain: list[float] = []
    replay: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        original = api.run(loaded.pipe, PROMPT, seed=3, steps=args.steps, runs_dir=Path(tmp))["run_dir"]
        for index in range(args.rounds):
            order = ("plain", "replay") if index % 2 == 0 else ("replay", "plain")
            for what in order:
                started = time.perf_counter()
                if what == "plain":
                    for _ in range(args.times):
                        loaded.pipe(PROMPT, num_inference_steps=args.steps, output_type="np",
                                    generator=torch.Generator().manual_seed(3))
                    plain.append(time.perf_counter() - started)
                else:
                    report = replay_run(original, args.times, pipeline=loaded.pipe, runs_dir=Path(tmp))
                    assert report["reproduced"], report["first_divergence"]
                    replay.append(time.perf_counter() - started)
    p, r = statistics.median(plain), statistics.median(replay)
    print(f"{args.times} plain runs:   median {p:.2f} s ({min(plain):.2f}-{max(plain):.2f})")
    print(f"replay x{args.times}:      median {r:.2f} s ({min(replay):.2f}-{max(replay):.2f}), "
          f"{r / args.times * 1000:.0f} ms a re-run, all bit-identical")
    print(f"ratio replay / plain: {r / p:.2f}x over {args.rounds} interleaved rounds")


if __name__ == "__main__":
    main()

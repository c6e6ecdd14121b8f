#!/usr/bin/env python
"""Sweep throughput on the demo pipeline: a sweep (every run traced, recorded, judged: verdict and first anomaly,
all in a sweep study) against a plain loop of `pipe(...)` calls over the same prompts and seeds, measured side by
side in one process, interleaved round by round (this machine is noisy). Goal: sweep ≥ 0.9× the plain loop.

Usage: python benchmarks/sweep_throughput.py [--rounds 7] [--prompts 3] [--seeds 0-2] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.loops.sweep import run_sweep
from ghostviewer.spec.seeds import parse_seeds

PROMPTS = ["a red circle on a blue background", "a green square on a white background",
           "a yellow star on a black background", "a white cross on a green background",
           "a blue triangle on a yellow background, bottom right"]


def plain_loop(pipe, prompts: list[str], seeds: list[int], steps: int) -> float:  # noqa: ANN001
    started = time.perf_counter()
    for prompt in prompts:
        for seed in seeds:
            pipe(prompt, num_inference_steps=steps, generator=torch.Generator().manual_seed(seed), output_type="np")
    return time.perf_counter() - started


def sweep(loaded, prompts: list[str], seeds: list[int], steps: int, runs: Path) -> float:  # noqa: ANN001
    started = time.perf_counter()
    result = run_sweep(prompts, seeds, pipeline=loaded, steps=steps, runs_dir=runs)
    elapsed = time.perf_counter() - started
    assert result["total"] == len(prompts) * len(seeds) and result["status"] == "done"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    prompts, seeds = PROMPTS[: args.prompts], parse_seeds(args.seeds)
    runs_per_round = len(prompts) * len(seeds)
    loaded = load_pipeline("demo", device="cpu")
    times: dict[str, list[float]] = {"plain loop": [], "sweep": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        plain_loop(loaded.pipe, prompts[:1], seeds[:1], args.steps)  # warm-up
        sweep(loaded, prompts[:1], seeds[:1], args.steps, runs)
        for _ in range(args.rounds):
            times["plain loop"].append(plain_loop(loaded.pipe, prompts, seeds, args.steps))
            times["sweep"].append(sweep(loaded, prompts, seeds, args.steps, runs))
    print(f"demo pipeline, {runs_per_round} runs a round ({len(prompts)} prompts x {len(seeds)} seeds), "
          f"{args.steps} steps, {args.rounds} interleaved rounds, torch threads {torch.get_num_threads()}")
    rates = {name: [runs_per_round / t for t in values] for name, values in times.items()}
    for name, values in rates.items():
        print(f"  {name:<11} median {statistics.median(values):5.2f} runs/s  "
              f"(min {min(values):5.2f}, max {max(values):5.2f})")
    ratios = [p / s for p, s in zip(times["plain loop"], times["sweep"], strict=True)]  # per round, side by side
    print(f"  sweep / plain loop throughput: median {statistics.median(ratios):.3f}x "
          f"(rounds {min(ratios):.3f}-{max(ratios):.3f}; goal >= 0.9x)")


if __name__ == "__main__":
    main()

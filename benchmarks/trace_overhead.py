#!/usr/bin/env python
"""Tracing overhead on the demo pipeline, measured side by side in one process (this machine is noisy).

Interleaves untraced runs (plain diffusers call), block-depth tracing, leaf-depth tracing and block depth with
feature-map captures, round-robin, and prints median times and ratios to untraced; plus bytes recorded per
step without feature maps. Goals: block depth ≤ 1.10×, ≤ 64 KiB per step.

Usage: python benchmarks/trace_overhead.py [--rounds 7] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ghostviewer.engine.loading.pipelines import LoadedPipeline, load_pipeline
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec

PROMPT = "a red circle on a blue background, top left"


def untraced(loaded, steps: int) -> float:
    started = time.perf_counter()
    loaded.pipe(PROMPT, num_inference_steps=steps, generator=torch.Generator().manual_seed(0), output_type="np")
    return time.perf_counter() - started


def traced(loaded, steps: int, runs: Path, **kwargs) -> tuple[float, Path]:
    started = time.perf_counter()
    result = execute_run(loaded, RunSpec(prompt=PROMPT, steps=steps, **kwargs), runs)
    return time.perf_counter() - started, Path(result["run_dir"])


def run_bytes(run_dir: Path) -> int:
    return sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file())


def demo_benchmark(doc: str | None) -> tuple[argparse.Namespace, LoadedPipeline]:
    """--rounds and --steps from the command line, and the demo pipeline on the CPU."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    return parser.parse_args(), load_pipeline("demo", device="cpu")


def main() -> None:
    args, loaded = demo_benchmark(__doc__)
    variants = {
        "untraced": lambda runs: (untraced(loaded, args.steps), None),
        "block depth": lambda runs: traced(loaded, args.steps, runs),
        "leaf depth": lambda runs: traced(loaded, args.steps, runs, trace_depth="leaf"),
        "block + captures": lambda runs: traced(
            loaded, args.steps, runs, capture=("unet.mid_block", "unet.up_blocks.*")
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    sizes: dict[str, int] = {}
    last_runs: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        for variant in variants.values():  # warm-up
            variant(runs)
        for _ in range(args.rounds):
            for name, variant in variants.items():
                elapsed, run_dir = variant(runs)
                times[name].append(elapsed)
                if run_dir is not None:
                    sizes[name] = run_bytes(run_dir)
                    last_runs[name] = run_dir
        base = statistics.median(times["untraced"])
        threads = torch.get_num_threads()
        print(f"demo pipeline, {args.steps} steps, {args.rounds} interleaved rounds, torch threads {threads}")
        for name, values in times.items():
            median = statistics.median(values)
            # Spread: the ratio to the untraced run of the same round (side by side), min-max over the rounds.
            ratios = [v / u for v, u in zip(values, times["untraced"], strict=True)]
            print(f"  {name:<18} median {median * 1000:7.1f} ms (min {min(values) * 1000:6.1f}, max "
                  f"{max(values) * 1000:6.1f})   ratio {median / base:5.2f}x (per round "
                  f"{statistics.median(ratios):4.2f}x, {min(ratios):4.2f}-{max(ratios):4.2f})")
        for name, run_dir in last_runs.items():
            rows = len(RunRecord(run_dir).stats(phase="denoise", step=1))
            print(f"  {name:<18} {rows} stats rows per step")
        for name, size in sizes.items():
            print(f"  {name:<18} {size / args.steps / 1024:6.1f} KiB recorded per step (whole run / steps)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Tracing overhead on a CUDA GPU, side by side in one process: untraced, traced with the fused statistics kernel
(engine/tracing/fused_stats.py, Triton) and traced with torch's functions, at block and leaf depth; then the same runs'
verdicts and first anomalies on the GPU and on the CPU under the ghost lab's faults, and whether a fused run and a
torch-functions run of one seed compare as identical (they must: same fingerprints, min, max and counts).

Needs a CUDA device (and Triton for the fused column); the demo pipeline is tiny, so on a fast GPU this measures
the CPU cost of launching kernels, where tracing costs most.

Usage: PYTHONPATH=. python benchmarks/gpu_trace_overhead.py [--rounds 7] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from ghostviewer.analysis.compare import comparable_stats, first_stat_divergence
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.engine.tracing import fused_stats
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec

PROMPT = "a red circle on a blue background, top left"
FAULTS = [(), ("nan-latents",), ("decoder-color-shift",), ("scaled-block",), ("dead-text-conditioning",)]


def timed(fn) -> float:  # noqa: ANN001
    started = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device here")
    gpu, cpu = load_pipeline("demo", device="cuda"), load_pipeline("demo", device="cpu")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton kernel "
          f"{'available' if fused_stats.triton is not None else 'not installed'}; demo, {args.steps} steps")
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)

        def run(loaded, fused: bool = True, **settings) -> dict:  # noqa: ANN001, ANN003
            was = fused_stats._disabled
            fused_stats._disabled = was or not fused
            try:
                return execute_run(loaded, RunSpec(prompt=PROMPT, steps=args.steps, **settings), runs)
            finally:
                fused_stats._disabled = was

        def untraced() -> None:
            gpu.pipe(PROMPT, num_inference_steps=args.steps, generator=torch.Generator().manual_seed(0),
                     output_type="np")

        for depth in ("block", "leaf"):
            times: dict[str, list[float]] = {"untraced": [], "fused kernel": [], "torch functions": []}
            for i in range(args.rounds + 2):  # two warm-up rounds (the kernel compiles on its first call)
                values = (timed(untraced), timed(lambda d=depth: run(gpu, True, trace_depth=d)),
                          timed(lambda d=depth: run(gpu, False, trace_depth=d)))
                if i >= 2:
                    for name, value in zip(times, values, strict=True):
                        times[name].append(value)
            base = statistics.median(times["untraced"])
            print(f"  {depth} depth: " + ", ".join(
                f"{name} {statistics.median(v) * 1000:.1f} ms ({statistics.median(v) / base:.2f}x)"
                for name, v in times.items()))
        a, b = (RunRecord(run(gpu, fused)["run_dir"]) for fused in (True, False))
        print("  fused vs torch functions, first divergence:", first_stat_divergence(*comparable_stats(a, b)))
        for faults in FAULTS:
            verdicts = [(r["verdict"]["label"], r.get("first_anomaly")) for r in
                        (run(loaded, faults=faults, seed=7) for loaded in (gpu, cpu))]
            print(f"  {', '.join(faults) or 'no fault'}: {'same' if verdicts[0] == verdicts[1] else 'DIFFERENT'} "
                  f"verdict and first anomaly on GPU and CPU: {verdicts[0]}")


if __name__ == "__main__":
    main()

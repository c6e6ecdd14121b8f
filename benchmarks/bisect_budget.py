#!/usr/bin/env python
"""Re-runs used by bisection per ghost of the ghost lab, against the budget ⌈log2 N⌉ + 1 (N: candidate blocks).

For each ghost: one bad run, then bisection by bypass (and, for fp16-vae-overflow, settings bisection against
the same run in float32). Prints the candidate count, the budget, the re-runs used, the culprit, the patching
outcome and the time of each bisection, then the total. A bisection over budget is marked OVER BUDGET.

Usage: python benchmarks/bisect_budget.py [--steps 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.loops.bisect_blocks import bisect_run
from ghostviewer.engine.loops.bisect_settings import bisect_settings
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.engine.tracing.blocks import resolve_module
from ghostviewer.spec import RunSpec

STAR = "a yellow star on a black background"
# (label, prompt, fault, seed, dtype)
GHOSTS = [
    ("short-prompt-attention", "red circle", "short-prompt-attention", 0, None),
    ("fp16-vae-overflow", STAR, "fp16-vae-overflow", 0, "float32,vae=float16"),
    ("nan-latents", "a green square on a white background", "nan-latents", 17, None),
    ("inf-trigger-word", "a purple cross on a yellow background", "inf-trigger-word", 0, None),
]
USER_HOOKED = "unet.mid_block.resnets.1.conv2"  # a user's own NaN, hooked into an in-memory pipeline


def _line(label: str, result: dict[str, Any], seconds: float) -> str:
    n, used, limit = result["candidates"], result["reruns"], result["budget"]
    flag = "  OVER BUDGET" if used > limit else ""
    patching = result.get("patching")
    patched = "-" if not patching else ("healthy" if patching["healthy"] else patching["verdict"])
    culprit = result["culprit"] or f"none ({result.get('reason', '')[:60]}...)"
    return (f"{label:<24} N={n:<3} budget={limit:<2} re-runs={used:<2} {seconds:5.1f}s  culprit={culprit}  "
            f"patching={patched}{flag}")


def run(steps: int, runs_dir: Path) -> float:
    started = time.perf_counter()
    loaded = {None: load_pipeline("demo", device="cpu")}
    for label, prompt, fault, seed, dtype in GHOSTS:
        if dtype not in loaded:
            loaded[dtype] = load_pipeline("demo", device="cpu", dtype=dtype)
        settings = RunSpec(prompt=prompt, seed=seed, steps=steps, faults=(fault,), dtype=dtype, source="demo")
        bad = execute_run(loaded[dtype], settings, runs_dir)
        t = time.perf_counter()
        result = bisect_run(bad["run_dir"], runs_dir=runs_dir)
        print(_line(label, result, time.perf_counter() - t), flush=True)

    pipe = loaded[None].pipe
    handle = resolve_module(pipe, USER_HOOKED).register_forward_hook(lambda _m, _a, out: out + float("nan"))
    try:
        bad = execute_run(loaded[None], RunSpec(prompt="a blue square on a white background", steps=steps),
                          runs_dir)
        t = time.perf_counter()
        result = bisect_run(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)
        print(_line("user hook (in memory)", result, time.perf_counter() - t), flush=True)
    finally:
        handle.remove()

    fault = ("fp16-vae-overflow",)
    bad = execute_run(load_pipeline("demo", device="cpu", dtype="float16"),
                      RunSpec(prompt=STAR, steps=steps, faults=fault, dtype="float16", source="demo"), runs_dir)
    good = execute_run(loaded[None], RunSpec(prompt=STAR, steps=steps, guidance=6.0, faults=fault), runs_dir)
    t = time.perf_counter()
    result = bisect_settings(bad["run_dir"], good["run_dir"], runs_dir=runs_dir)
    print(f"{'settings: fp16 vs fp32':<24} differences={len(result['differences'])} re-runs={result['reruns']} "
          f"{time.perf_counter() - t:5.1f}s  culprit={result['culprit_settings']}", flush=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        total = run(args.steps, Path(tmp))
    print(f"total {total:.1f}s (steps={args.steps}, bad runs and pipeline loads included)")


if __name__ == "__main__":
    main()

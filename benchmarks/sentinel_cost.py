#!/usr/bin/env python
"""What block depth's prompt sentinels (the attention modules that read the prompt, engine/tracing/blocks.py) cost,
side by side in one process on the demo: untraced calls, block depth without the sentinels (what block depth traced
before them) and block depth as it is, round-robin; median wall and CPU times, ratios to untraced, the
statistics rows and bytes a step records (the same: a healthy run's sentinels write nothing), and the median of the
per-round ratios of the two block-depth variants.

Usage: python benchmarks/sentinel_cost.py [--rounds 7] [--steps 20]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.trace_overhead import demo_benchmark, run_bytes, traced, untraced
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.tracing import blocks, tracer
from ghostviewer.record import RunRecord


def main() -> None:
    args, loaded = demo_benchmark(__doc__)
    without = LoadedPipeline(**{**vars(loaded), "pipe": type(loaded.pipe).from_pipe(loaded.pipe)})
    plain = tracer.iter_modules
    # the same tracer, the sentinels left out for one pipeline object (its module list is cached per object)
    tracer.iter_modules = lambda pipe, depth="block": blocks.iter_modules(
        pipe, depth, sentinels=pipe is not without.pipe)
    variants = {
        "untraced": lambda runs: (untraced(loaded, args.steps), None),
        "block, no sentinels": lambda runs: traced(without, args.steps, runs),
        "block (sentinels)": lambda runs: traced(loaded, args.steps, runs),
    }
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    dirs: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants.values():  # warm-up
            variant(Path(tmp) / "warm")
        for round_ in range(args.rounds):
            names = list(variants)[round_ % 3:] + list(variants)[:round_ % 3]
            for name in names:
                started = time.process_time()
                seconds, run_dir = variants[name](Path(tmp) / name)
                cpu[name].append(time.process_time() - started)
                wall[name].append(seconds)
                if run_dir is not None:
                    dirs[name] = run_dir
        base_wall, base_cpu = statistics.median(wall["untraced"]), statistics.median(cpu["untraced"])
        print(f"demo, {args.steps} steps, {args.rounds} rounds")
        for name in variants:
            w, c = statistics.median(wall[name]), statistics.median(cpu[name])
            line = f"{name:22s} wall {w:6.3f} s ({w / base_wall:.3f}x)  cpu {c:6.3f} s ({c / base_cpu:.3f}x)"
            if name in dirs:
                rows = len(RunRecord(dirs[name]).stats(phase="denoise", step=1))
                line += f"  {rows} rows/step, {run_bytes(dirs[name]) / args.steps / 1024:.1f} KiB/step"
            print(line)
        pairs = [s / n for s, n in zip(cpu["block (sentinels)"], cpu["block, no sentinels"], strict=True)]
        print(f"sentinels / no sentinels, CPU, median of per-round ratios: {statistics.median(pairs):.3f}x")
    tracer.iter_modules = plain
    # The whole-run ratio is within this machine's noise; the hook's own cost, timed alone, is steadier.
    watching = tracer.Tracer(loaded.pipe)
    path = sorted(p for p in watching.sentinels if p.startswith("unet."))[0]
    hook, output = watching._sentinel_hook(path), torch.randn(2, 256, 48)  # an attn2 output of the demo's shape
    started = time.perf_counter()
    for _ in range(2000):
        hook(None, (), {"attention_mask": None}, output)
    per_call = (time.perf_counter() - started) / 2000
    calls = sum(p.startswith("unet.") for p in watching.sentinels) * args.steps
    print(f"one sentinel hook on a healthy output: {per_call * 1e6:.1f} us; {calls} a run of {args.steps} steps: "
          f"{calls * per_call * 1e3:.2f} ms, {calls * per_call / base_wall:.2%} of an untraced run")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Where a traced run's overhead goes, on the demo pipeline, measured side by side (interleaved rounds).

Each variant adds one layer to a plain diffusers call, so the differences between rows are the layers' costs:
  plain          the pipeline alone
  empty hooks    a no-op forward hook on every block-depth module (hook dispatch itself)
  stats          the tracer's hooks: statistics and fingerprints of every output, queued
  stats + rows   … and each step's queue turned into columns on the pipeline's thread (harvest)
  full run       execute_run: the record written in batches (SQLite, step files, previews), anomaly checks, judge,
                 verdict
Prints medians and the per-round ratio to plain (median, min-max), plus what one memory reading costs inside a run
against alone.

Usage: PYTHONPATH=. python benchmarks/trace_breakdown.py [--rounds 7] [--steps 20]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.trace_overhead import demo_benchmark
from ghostviewer.engine.run import runner
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.engine.tracing import memory
from ghostviewer.engine.tracing.tracer import Tracer
from ghostviewer.spec import RunSpec

PROMPT = "a red circle on a blue background, top left"


def variants(loaded, steps: int, runs: Path) -> dict[str, Callable[[], None]]:  # noqa: ANN001
    pipe = loaded.pipe
    tracer = Tracer(pipe)

    def call(**kwargs) -> None:  # noqa: ANN003
        pipe(PROMPT, num_inference_steps=steps, generator=torch.Generator().manual_seed(0), output_type="np",
             **kwargs)

    def empty_hooks() -> None:
        handles = [module.register_forward_hook(lambda *_: None) for _, module in tracer.modules]
        try:
            with torch.inference_mode():
                call()
        finally:
            for handle in handles:
                handle.remove()

    def traced(harvest: bool) -> None:
        def on_step(_pipe, index, _t, _kw):  # noqa: ANN001, ANN202
            batch = tracer.take()
            if harvest:
                Tracer.harvest(batch)
            tracer.step = index + 1
            return {}

        with torch.inference_mode(), tracer.hooks():
            tracer.step = 0
            call(callback_on_step_end=on_step)
            tracer.take()

    return {
        "plain": call,
        "empty hooks": empty_hooks,
        "stats": lambda: traced(False),
        "stats + rows": lambda: traced(True),
        "full run": lambda: execute_run(loaded, RunSpec(prompt=PROMPT, steps=steps), runs),
    }


def memory_reading_cost(loaded, steps: int, runs: Path) -> tuple[float, float]:  # noqa: ANN001
    """µs per read_memory call: alone, and inside a traced run (the runner reads it at every step)."""
    started = time.perf_counter()
    for _ in range(200):
        memory.read_memory("cpu")
    alone = (time.perf_counter() - started) / 200
    spent: list[float] = []
    original = runner.read_memory

    def timed(device: str):  # noqa: ANN202
        t = time.perf_counter()
        try:
            return original(device)
        finally:
            spent.append(time.perf_counter() - t)

    runner.read_memory = timed
    try:
        execute_run(loaded, RunSpec(prompt=PROMPT, steps=steps), runs)
    finally:
        runner.read_memory = original
    return alone * 1e6, statistics.median(spent) * 1e6


def main() -> None:
    args, loaded = demo_benchmark(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        table = variants(loaded, args.steps, runs)
        for variant in table.values():  # warm-up
            variant()
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(args.rounds):
            for name, variant in table.items():
                started = time.perf_counter()
                variant()
                times[name].append(time.perf_counter() - started)
        alone, inside = memory_reading_cost(loaded, args.steps, runs)
    print(f"demo pipeline, {args.steps} steps, {args.rounds} interleaved rounds, torch threads "
          f"{torch.get_num_threads()}")
    for name, values in times.items():
        ratios = [v / p for v, p in zip(values, times["plain"], strict=True)]
        print(f"  {name:<14} median {statistics.median(values) * 1000:7.1f} ms   per round "
              f"{statistics.median(ratios):5.3f}x ({min(ratios):5.3f}-{max(ratios):5.3f})")
    print(f"  one memory reading: {alone:.0f} µs alone, {inside:.0f} µs inside a traced run (median)")


if __name__ == "__main__":
    main()

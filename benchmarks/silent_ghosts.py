#!/usr/bin/env python
"""Silent ghosts: detection and localisation of the ghost lab's silent faults, and what the checks cost.

For each silent fault × seeds (default 3 faults × 10 seeds, healthy captions cycling; the demo pipeline at its
default settings, so its shipped baseline is used): detected = the verdict is not 'ok' or there is a first
anomaly; by = which check caught it (drift, off_prompt, color_cast); localised = the first anomaly names the
module the fault is injected at; image-only = the image verdict alone (without baseline or prompt) flags it.

Check cost: the time the baseline and prompt checks add to one run, measured piece by piece on a real run
(drift checks over its stat rows, the per-channel-means hooks' own time and writing them to the record, the
image judged in context, the baseline lookup) against the run's own wall time (median of --timing runs): an
A/B of whole runs cannot resolve 2 % on a shared 2-core machine.
Build time: `--build N` also times building a baseline from N runs (scripts/build_demo_baseline.py does 240).

Usage: python benchmarks/silent_ghosts.py [--seeds 10] [--timing 10] [--build 0]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from safetensors.numpy import save_file

from benchmarks.false_alarms import healthy_prompts
from ghostviewer.analysis.anomaly import AnomalyDetector
from ghostviewer.analysis.baseline_store import recorded_channel_means
from ghostviewer.analysis.verdict_context import verdict_in_context
from ghostviewer.analysis.verdicts import image_verdict
from ghostviewer.demo.baseline_prompts import baseline_prompts
from ghostviewer.engine.faults import FAULTS
from ghostviewer.engine.interventions.base import RunContext, applied
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.loops.baseline_build import build_baseline
from ghostviewer.engine.run.baseline_lookup import lookup_baseline
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.engine.tracing.channel_means import ChannelMeans
from ghostviewer.engine.tracing.tracer import Tracer
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec

SILENT = ("decoder-color-shift", "dead-text-conditioning", "scaled-block")


def detect(loaded: Any, runs_dir: Path, seeds: list[int]) -> dict[str, dict[str, Any]]:
    prompts = healthy_prompts(len(seeds), seed=404)
    report = {}
    for fault in SILENT:
        by: Counter[str] = Counter()
        detected = localised = image_only = 0
        for prompt, seed in zip(prompts, seeds):
            result = execute_run(loaded, RunSpec(prompt=prompt, seed=seed, faults=(fault,)), runs_dir)
            label, anomaly = result["verdict"]["label"], result["first_anomaly"]
            detected += label != "ok" or anomaly is not None
            localised += anomaly is not None and anomaly["module"] == FAULTS[fault].injected_at
            image_only += image_verdict(np.asarray(Image.open(result["image"]).convert("RGB")))["label"] != "ok"
            by.update([f"drift({anomaly['stat'].split('[')[0]})"] if anomaly and anomaly["kind"] == "drift" else [])
            by.update([label] if label != "ok" else [])
        report[fault] = {"runs": len(seeds), "detected": detected, "localised": localised,
                         "image_only": image_only, "by": dict(by), "module": FAULTS[fault].injected_at}
    return report


def check_cost(loaded: Any, runs_dir: Path, rounds: int) -> dict[str, float]:
    """Milliseconds the checks add to one run, piece by piece, and the median run's wall time."""
    settings = RunSpec(prompt="a red circle on a blue background", seed=5)
    walls = [execute_run(loaded, settings, runs_dir)["elapsed_s"] for _ in range(rounds)]
    result = execute_run(loaded, settings, runs_dir)
    record = RunRecord(result["run_dir"])
    rows, means = record.stats(), recorded_channel_means(record)
    baseline, _ = lookup_baseline(loaded, record.settings, runs_dir)
    image = np.asarray(Image.open(result["image"]).convert("RGB")).astype(np.float32) / 255.0

    def per_call(fn: Any, n: int = 20) -> float:
        started = time.perf_counter()
        for _ in range(n):
            fn()
        return 1000 * (time.perf_counter() - started) / n

    plain = per_call(lambda: AnomalyDetector().feed(rows))
    cost = {
        "drift_checks_ms": per_call(lambda: AnomalyDetector(baseline, means).feed(rows)) - plain,
        "verdict_in_context_ms": per_call(lambda: verdict_in_context(image_verdict(image), image, settings.prompt,
                                                                     baseline, demo=True)) - per_call(
            lambda: image_verdict(image)),
        "lookup_ms": per_call(lambda: lookup_baseline(loaded, record.settings, runs_dir)),
        "channel_means_ms": _channel_means_cost(loaded, settings, runs_dir),
    }
    cost["total_ms"] = sum(cost.values())
    cost["run_ms"] = 1000 * statistics.median(walls)
    cost["overhead_pct"] = 100 * cost["total_ms"] / cost["run_ms"]
    return cost


class _TimedChannelMeans(ChannelMeans):
    """ChannelMeans whose hooks add up the time they take."""

    spent = 0.0

    def _hook(self, path: str):
        inner = super()._hook(path)

        def hook(*args: Any) -> None:
            started = time.perf_counter()
            inner(*args)
            self.spent += time.perf_counter() - started

        return hook


def _channel_means_cost(loaded: Any, settings: RunSpec, runs_dir: Path) -> float:
    """The per-channel-means hooks' own time in a traced run, plus writing them to the record (median of 5)."""
    pipe = loaded.pipe
    tracer = Tracer(pipe)
    ctx = RunContext(pipe=pipe, prompt=settings.prompt, negative_prompt="", seed=0, current_step=lambda: 0)
    costs = []
    for _ in range(5):
        probe = _TimedChannelMeans(tracer.modules)
        with torch.inference_mode(), tracer.hooks(), applied([probe], ctx):
            pipe(settings.prompt, num_inference_steps=2, output_type="np", generator=torch.Generator().manual_seed(0))
        tracer.flush()
        started = time.perf_counter()
        save_file(probe.arrays(), str(runs_dir / "channel_means.safetensors"))
        costs.append(probe.spent + time.perf_counter() - started)
    return 1000 * statistics.median(costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--timing", type=int, default=10)
    parser.add_argument("--build", type=int, default=0, help="also time a baseline build from this many runs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = load_pipeline("demo", device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        report = detect(loaded, Path(tmp), list(range(2000, 2000 + args.seeds)))
        for fault, row in report.items():
            print(f"{fault:<24} detected {row['detected']}/{row['runs']}, localised {row['localised']}/{row['runs']} "
                  f"at {row['module']}, image verdict alone {row['image_only']}/{row['runs']}, by {row['by']}")
        cost = check_cost(loaded, Path(tmp), args.timing)
        print("check cost per run: " + ", ".join(f"{k}={v:.2f}" for k, v in cost.items()))
        if args.build:
            started = time.perf_counter()
            built = build_baseline(loaded, baseline_prompts(args.build), list(range(args.build)), Path(tmp),
                                   pairing="zip")
            took = time.perf_counter() - started
            print(f"baseline build: {built['runs']} runs in {took:.1f} s ({took / built['runs']:.2f} s a run), "
                  f"{Path(built['baseline']).stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()

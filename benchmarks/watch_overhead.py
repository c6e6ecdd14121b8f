#!/usr/bin/env python
"""A watched call against an unwatched one on the demo pipeline at block depth, side by side in one process.

Three pipeline objects share the demo's components (`from_pipe`): one plain, one watched with keep="all", one with
keep="anomalies"; each round calls the three in turn with the same arguments (a user's call: a PIL image out), each
round starting with the next of the three.
Prints median times (wall; the process's CPU time, steadier on a shared machine; the calling thread's CPU time,
steadier still where other programs load the machine, though it leaves out the watch study's own writer thread) and
ratios to the plain call (goals: keep="all" ≤ 1.10×, keep="anomalies" ≤ 1.05×), and the bytes a healthy call leaves
on disk under keep="anomalies" (goal: a summary row, under 4 KiB).

Usage: python benchmarks/watch_overhead.py [--rounds 11] [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import torch
from diffusers import StableDiffusionPipeline

import ghostviewer
from ghostviewer.engine.loading.pipelines import load_pipeline

PROMPT = "a red circle on a blue background, top left"


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def row_bytes(study: Path) -> int:
    """The bytes of the study's rows for its calls: what a healthy call leaves (SQLite pages hold many)."""
    with sqlite3.connect(study / "study.sqlite") as conn:
        (runs,) = conn.execute("SELECT SUM(LENGTH(key) + LENGTH(role) + LENGTH(run_dir) + IFNULL(LENGTH(status), 0)"
                               " + IFNULL(LENGTH(verdict), 0) + IFNULL(LENGTH(first_anomaly), 0) + LENGTH(note) + 16)"
                               " FROM runs").fetchone()
    return int(runs or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    load_before = os.getloadavg()  # how busy the machine was: other programs' load makes single rounds vary
    demo = load_pipeline("demo", device="cpu").pipe
    pipes = {name: StableDiffusionPipeline.from_pipe(demo) for name in ("unwatched", "keep=all", "keep=anomalies")}
    for pipe in pipes.values():
        pipe.set_progress_bar_config(disable=True)

    def call(pipe: StableDiffusionPipeline) -> tuple[float, float, float]:
        """(wall seconds, CPU seconds of the whole process — what the call cost whatever else the machine runs —,
        CPU seconds of the calling thread)."""
        started, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
        pipe(PROMPT, num_inference_steps=args.steps, generator=torch.Generator().manual_seed(0))
        return time.perf_counter() - started, time.process_time() - cpu, time.thread_time() - own

    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        fixed = ghostviewer.attach(pipes["keep=anomalies"], runs_dir=runs / "one", keep="anomalies")
        call(pipes["keep=anomalies"])  # also the warm-up of the anomalies watcher's first call
        fixed.detach()
        watchers = {"keep=all": ghostviewer.attach(pipes["keep=all"], runs_dir=runs / "all", keep="all"),
                    "keep=anomalies": ghostviewer.attach(pipes["keep=anomalies"], runs_dir=runs / "anomalies",
                                                         keep="anomalies")}
        for pipe in pipes.values():  # warm-up
            call(pipe)
        times: dict[str, list[float]] = {name: [] for name in pipes}
        cpu: dict[str, list[float]] = {name: [] for name in pipes}
        thread: dict[str, list[float]] = {name: [] for name in pipes}
        order = list(pipes)
        for round_ in range(args.rounds):
            # each round starts with another of the three: none always runs first (after the others' writes)
            for name in order[round_ % 3:] + order[:round_ % 3]:
                wall, used, own = call(pipes[name])
                times[name].append(wall)
                cpu[name].append(used)
                thread[name].append(own)
        summaries = {name: w.summary() for name, w in watchers.items()}
        for watcher in watchers.values():
            watcher.detach()
        print(f"demo pipeline, {args.steps} steps, {args.rounds} interleaved rounds, torch threads "
              f"{torch.get_num_threads()}, block depth; load average (1 min) {load_before[0]:.2f} before, "
              f"{os.getloadavg()[0]:.2f} after, {os.cpu_count()} CPUs")
        goals = {"unwatched": "", "keep=all": "goal ≤ 1.10x", "keep=anomalies": "goal ≤ 1.05x"}
        for label, series in (("wall", times), ("CPU", cpu), ("thread", thread)):
            base, best = statistics.median(series["unwatched"]), min(series["unwatched"])
            for name, values in series.items():
                median = statistics.median(values)
                ratios = [v / u for v, u in zip(values, series["unwatched"], strict=True)]
                # best: fastest against fastest, the rounds least disturbed by whatever else the machine runs
                print(f"  {label:<6} {name:<15} median {median * 1000:7.1f} ms   ratio {median / base:5.2f}x (per "
                      f"round {statistics.median(ratios):4.2f}x, {min(ratios):4.2f}-{max(ratios):4.2f}; best "
                      f"{min(values) / best:4.2f}x)   {goals[name]}")
        anomalies = summaries["keep=anomalies"]
        calls = anomalies["calls"]
        study = Path(anomalies["study_dir"])
        print(f"  keep=anomalies: {calls} calls, {anomalies['kept']} kept, {anomalies['failed']} failed; per healthy "
              f"call {row_bytes(study) / calls:.0f} bytes of summary row (goal < 4096); the whole study folder "
              f"{folder_bytes(study) / 1024:.1f} KiB (with one call: {folder_bytes(fixed.study_dir) / 1024:.1f} KiB)")
        all_calls = summaries["keep=all"]
        print(f"  keep=all: {all_calls['kept']} records kept, "
              f"{folder_bytes(Path(all_calls['study_dir'])) / all_calls['calls'] / 1024:.1f} KiB per call")


if __name__ == "__main__":
    main()

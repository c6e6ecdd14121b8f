#!/usr/bin/env python
"""Sweeps on a real multi-node Ray cluster started on this machine: runs/s with one worker node and with two, and
the driver's memory over 10,000 queued runs, printed side by side in one run.

The cluster: ray.cluster_utils.Cluster, a head that runs no actor (the driver's node) and worker nodes of one CPU
each (separate raylets and object stores on loopback ports), reached by its address as a client would. Every
node is on this machine, so two nodes share its cores with the driver (and with whatever else runs).

- runs/s: sweeps of the demo pipeline (RUNS runs of STEPS steps, every run traced, recorded and judged),
  alternately on one worker node and on two (ROUNDS in all, medians): the rate once every node's worker is up
  (its process has loaded the pipeline) and the wall time (worker start and pipeline load included).
- driver memory: 10,000 runs queued through the whole driver (run_sweep: the study's index, progress, the
  statistics, the run dicts it returns) to workers that answer at once (DryWorker: no pipeline), the driver's
  RSS read every 1,000 runs; then the same through the Ray loop alone (ray_results, nothing kept).

Usage: python benchmarks/ray_cluster.py [--runs 16] [--steps 10] [--rounds 4] [--queued 10000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from ghostviewer.engine.loops import sweep_ray  # noqa: E402
from ghostviewer.engine.loops.sweep import run_sweep  # noqa: E402
from ghostviewer.engine.loops.sweep_jobs import SweepJob  # noqa: E402
from ghostviewer.engine.loops.sweep_spec import SweepSpec  # noqa: E402
from ghostviewer.engine.run.runner import CancelToken  # noqa: E402
from ghostviewer.spec import RunSpec  # noqa: E402

PROMPTS = ["a red circle on a blue background", "a green square on a white background",
           "a yellow star on a black background", "a white cross on a green background"]
STORE = 80 << 20


class DryWorker(sweep_ray.SweepWorker):
    """A sweep actor that makes no run: answers each job at once with a run dict of the usual shape."""

    def __init__(self, params: dict[str, Any], threads: int, allow_pickle: bool = False) -> None:
        self.token = None

    def run(self, job: SweepJob, runs_dir: str) -> dict[str, Any]:
        return {"run_dir": f"{runs_dir}/dry-{job.seed:06d}-{abs(hash(job.prompt)) % 10**6:06d}",
                "prompt": job.prompt, "seed": job.seed, "steps": 1, "verdict": {"label": "ok", "scores": {}},
                "first_anomaly": None, "image": None, "elapsed_s": 0.0, "status": "done"}

    def cancel(self) -> None:
        pass


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _workers_up() -> int:
    """Sweep workers that have loaded their pipeline (process title `ray::SweepWorker` or `...SweepWorker.run`)."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        count += title in (b"ray::SweepWorker", b"ray::SweepWorker.run")
    return count


def _children(parents: set[int]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent in parents:
            found.append(int(entry))
    return found


def _wait_for(pids: list[int]) -> None:
    """The nodes' worker processes outlive their raylet by a few seconds: wait for them (up to 30 s)."""
    deadline = time.monotonic() + 30
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        time.sleep(0.1)


def timed_sweep(address: str, runs_dir: Path, runs: int, steps: int, nodes: int, first_seed: int) -> dict[str, Any]:
    """One demo sweep; runs/s counted from the moment every node's worker is up (pipeline loaded) to the end."""
    seeds = range(first_seed, first_seed + -(-runs // len(PROMPTS)))
    arrivals: list[float] = []
    up: list[tuple[float, int]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set() and not up:
            if _workers_up() >= nodes:
                up.append((time.perf_counter(), len(arrivals)))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    started = time.perf_counter()
    watcher.start()
    try:
        result = run_sweep(PROMPTS, list(seeds), source="demo", steps=steps, runs_dir=runs_dir, ray=address,
                           on_progress=lambda e: arrivals.append(time.perf_counter())
                           if e["event"] == "sweep_progress" else None)
    finally:
        stop.set()
        watcher.join()
    wall = time.perf_counter() - started
    assert result["status"] == "done" and result["failed"] == 0, result.get("status")
    assert up and len(arrivals) - up[0][1] >= 4, "the workers came up too late to time them: give more --runs"
    since, done_before = up[0]
    return {"nodes": nodes, "runs": len(arrivals), "steps": steps, "wall_s": round(wall, 1),
            "runs_per_s": round((len(arrivals) - done_before) / (arrivals[-1] - since), 3),
            "runs_per_s_wall": round(len(arrivals) / wall, 3), "timed_runs": len(arrivals) - done_before}


def queued_memory(address: str, runs_dir: Path, queued: int) -> dict[str, Any]:
    prompts = [f"prompt {index}" for index in range(100)]
    seeds = f"0-{queued // len(prompts) - 1}"
    samples: dict[int, float] = {}
    sweep_ray.WORKER = DryWorker
    try:
        before = rss_mib()
        started = time.perf_counter()

        def sample(event: dict[str, Any]) -> None:
            if event["event"] == "sweep_progress" and event["done"] % 1000 == 0:
                samples[event["done"]] = round(rss_mib(), 1)

        result = run_sweep(prompts, seeds, source="demo", steps=1, runs_dir=runs_dir, ray=address,
                           on_progress=sample)
        wall = time.perf_counter() - started
    finally:
        sweep_ray.WORKER = sweep_ray.SweepWorker
    assert result["status"] == "done" and result["total"] == queued
    growth = samples[queued] - samples[min(samples)]
    return {"queued": queued, "rss_before_mib": round(before, 1), "rss_mib": samples,
            "growth_mib": round(growth, 1), "growth_bytes_per_run": round(growth * 2**20 / (queued - min(samples))),
            "wall_s": round(wall, 1), "runs_per_s": round(queued / wall, 1)}


def loop_memory(address: str, runs_dir: Path, queued: int) -> dict[str, Any]:
    """The same 10,000 runs through the Ray loop alone (sweep_ray.ray_results, no study, nothing kept): what the
    queue itself costs the driver."""
    spec = SweepSpec([], [0], RunSpec(prompt="", steps=1))
    jobs = (SweepJob(f"prompt {index % 100}", index) for index in range(queued))
    samples: dict[int, float] = {}
    sweep_ray.WORKER = DryWorker
    try:
        for done, _ in enumerate(sweep_ray.ray_results(spec, jobs, runs_dir, CancelToken(), address), start=1):
            if done % 1000 == 0:
                samples[done] = round(rss_mib(), 1)
    finally:
        sweep_ray.WORKER = sweep_ray.SweepWorker
    growth = samples[queued] - samples[min(samples)]
    return {"queued": queued, "rss_mib": samples, "growth_mib": round(growth, 1),
            "growth_bytes_per_run": round(growth * 2**20 / (queued - min(samples)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=4, help="sweeps, alternately on one node and on two")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": STORE,
                                                            "include_dashboard": False})
    figures: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    rounds: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    try:
        with tempfile.TemporaryDirectory(prefix="ray-cluster-bench-") as folder:
            runs_dir = Path(folder) / "runs"
            cluster.add_node(num_cpus=1, object_store_memory=STORE)
            for index in range(args.rounds):  # interleaved: one node, two, one, two... (this machine is shared)
                second = cluster.add_node(num_cpus=1, object_store_memory=STORE) if index % 2 else None
                cluster.wait_for_nodes()
                nodes = 2 if second else 1
                rounds[nodes].append(timed_sweep(cluster.address, runs_dir, args.runs, args.steps, nodes,
                                                 1000 * index))
                if second is not None:
                    cluster.remove_node(second)
            cluster.add_node(num_cpus=1, object_store_memory=STORE)
            cluster.wait_for_nodes()
            figures["driver_memory"] = queued_memory(cluster.address, runs_dir, args.queued)
            figures["loop_memory"] = loop_memory(cluster.address, runs_dir, args.queued)
    finally:
        workers = _children({node.all_processes["raylet"][0].process.pid for node in cluster.list_all_nodes()})
        ray.shutdown()
        cluster.shutdown()
        _wait_for(workers)
    figures["load_after"] = os.getloadavg()[0]
    figures["rounds"] = rounds
    one = statistics.median(r["runs_per_s"] for r in rounds[1])
    two = statistics.median(r["runs_per_s"] for r in rounds[2])
    figures["one_node_runs_per_s"], figures["two_nodes_runs_per_s"] = one, two
    figures["speedup"] = round(two / one, 2)
    memory = figures["driver_memory"]
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"demo sweep on a Ray cluster ({args.runs} runs of {args.steps} steps a round, {figures['cpus']} cores "
          f"here, load average {figures['load_before']:.1f} before, {figures['load_after']:.1f} after)")
    print(f"{'':12}{'runs/s (workers up)':>21}{'runs/s (wall)':>16}{'wall s':>9}   rounds")
    for nodes in (1, 2):
        rows = rounds[nodes]
        print(f"{'one node' if nodes == 1 else 'two nodes':12}"
              f"{statistics.median(r['runs_per_s'] for r in rows):>21.2f}"
              f"{statistics.median(r['runs_per_s_wall'] for r in rows):>16.2f}"
              f"{statistics.median(r['wall_s'] for r in rows):>9.1f}   "
              + " ".join(f"{r['runs_per_s']:.2f}" for r in rows))
    print(f"two nodes / one: {figures['speedup']:.2f}x")
    marks = ", ".join(f"{done:,}: {mib:.1f}" for done, mib in sorted(memory["rss_mib"].items()))
    print(f"driver RSS over {memory['queued']:,} queued runs (MiB; before {memory['rss_before_mib']:.1f}): {marks}")
    print(f"growth {memory['growth_mib']:.1f} MiB from the first 1,000 to the last "
          f"({memory['growth_bytes_per_run']} bytes a run), {memory['runs_per_s']:.0f} runs/s through the driver")
    loop = figures["loop_memory"]
    marks = ", ".join(f"{done:,}: {mib:.1f}" for done, mib in sorted(loop["rss_mib"].items()))
    print(f"the Ray loop alone (no study, nothing kept) over {loop['queued']:,} runs (MiB): {marks}")
    print(f"growth {loop['growth_mib']:.1f} MiB ({loop['growth_bytes_per_run']} bytes a run): the rest is the sweep's "
          "result, every run dict returned (CONTRACT), and its index of done keys")


if __name__ == "__main__":
    main()

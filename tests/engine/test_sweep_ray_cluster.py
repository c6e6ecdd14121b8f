"""Sweeps on a real multi-node Ray cluster started on this machine (ray.cluster_utils.Cluster: a head that runs
no actor and worker nodes of one CPU each, separate raylets on loopback ports), reached by its address as a client
would: a node killed mid-run, every node lost and a resume, a poisoned device and an out-of-memory.

Each test starts its own cluster and shuts it down (no ray process is left). They cost about 30 CPU-s each (96 for
the three with pytest's start, 2 min 20 s on 2 cores, counted over every process of the cluster: a per-test CPU
count sees 4-5 s, the driver's, since Ray's workers are not its children), so they run with `make
test-ray-cluster` (GHOSTVIEWER_RAY_CLUSTER=1), not in `make test`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops import sweep_ray
from ghostviewer.engine.loops.sweep import run_sweep
from ghostviewer.record import RecordError, RunRecord, StudyRecord
from tests.engine.ray_workers import OOM_PROMPT, FlakyDeviceWorker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("GHOSTVIEWER_RAY_CLUSTER"),
                       reason="a multi-node Ray cluster: make test-ray-cluster (GHOSTVIEWER_RAY_CLUSTER=1)"),
    pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds a busy Ray worker through /proc"),
]

PROMPTS = ["a red circle on a blue background", "a green square on a white background"]
STORE = 80 << 20  # each node's object store: the sweep passes small dicts only


class RayCluster:
    """A head (no CPU: the driver's node, never killed) and worker nodes added as a test needs them."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "object_store_memory": STORE, "include_dashboard": False})
        self.address = self.cluster.address

    def add_node(self) -> Any:
        node = self.cluster.add_node(num_cpus=1, object_store_memory=STORE)
        self.cluster.wait_for_nodes()
        return node

    def kill_when_a_run_starts(self) -> threading.Thread:
        """In the background: SIGKILL every process of the first worker node whose actor starts a run (a Ray
        worker's process title turns from `ray::SweepWorker` to `ray::SweepWorker.run`), a run in flight: its
        workers first (a raylet's workers outlive it by a moment and could still send their run back), then the
        raylet and the node's other processes."""
        raylets = {node.all_processes["raylet"][0].process.pid: node for node in self.cluster.worker_nodes}
        scanned = threading.Event()
        thread = threading.Thread(target=self._kill_first_busy, args=(raylets, scanned), daemon=True)
        thread.killed = None  # type: ignore[attr-defined]
        thread.start()
        scanned.wait(timeout=30)  # the workers idle now (the driver waits for this call) are known to it
        return thread

    def _kill_first_busy(self, raylets: dict[int, Any], scanned: threading.Event) -> None:
        idle: set[int] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for pid, title, parent in list(_processes()):
                if parent not in raylets:
                    continue
                if title == "ray::SweepWorker":
                    idle.add(pid)
                elif title.startswith("ray::SweepWorker.run") and pid in idle:  # idle a moment ago: just begun
                    for child, _, above in list(_processes()):  # the node's workers die with it
                        if above == parent:
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(child, signal.SIGKILL)
                    self.cluster.remove_node(raylets[parent], allow_graceful=False)
                    threading.current_thread().killed = raylets[parent]  # type: ignore[attr-defined]
                    scanned.set()
                    return
            scanned.set()
            time.sleep(0.005)
        scanned.set()

    def shutdown(self) -> None:
        """The driver's connection, then every node; the nodes' worker processes, which outlive their raylet by a
        few seconds, are waited for (and killed after 20 s): no ray process is left behind."""
        import ray

        raylets = {node.all_processes["raylet"][0].process.pid for node in self.cluster.list_all_nodes()}
        workers = [pid for pid, _, parent in _processes() if parent in raylets]
        ray.shutdown()
        self.cluster.shutdown()
        deadline = time.monotonic() + 20
        while workers and time.monotonic() < deadline:
            workers = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
            time.sleep(0.1)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _processes() -> Iterator[tuple[int, str, int]]:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        yield int(entry), title, parent


@pytest.fixture
def cluster() -> Iterator[RayCluster]:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()  # a session another test left: this test reaches its own cluster by address
    made = RayCluster()
    try:
        yield made
    finally:
        made.shutdown()


def _done_on_disk(study: StudyRecord) -> list[tuple[str, int]]:
    """(prompt, seed) of every whole, finished run in the study's runs folder, indexed or not."""
    found = []
    for folder in sorted(study.runs_dir.iterdir()):
        try:
            record = RunRecord(folder)
        except RecordError:
            continue
        if record.status == "done" and record.complete:
            found.append((record.settings["prompt"], int(record.settings["seed"])))
    return found


def _keys(study: StudyRecord) -> list[tuple[str, int]]:
    return [(run.key["prompt"], int(run.key["seed"])) for run in study.runs()]


def _notes(study: StudyRecord) -> list[str]:
    return [event.message for event in study.events() if event.kind == "ray_worker"]


def test_a_node_killed_mid_sweep_the_sweep_finishes_on_the_other_and_a_resume_makes_nothing_again(
        cluster: RayCluster, runs_dir: Path) -> None:
    cluster.add_node()
    cluster.add_node()
    killer: list[threading.Thread] = []

    def kill_after_two(event: dict[str, Any]) -> None:
        if event["event"] == "sweep_progress" and event["done"] == 2:
            killer.append(cluster.kill_when_a_run_starts())

    result = run_sweep(PROMPTS, "0-2", source="demo", steps=3, runs_dir=runs_dir, ray=cluster.address,
                       on_progress=kill_after_two)
    killer[0].join(timeout=60)
    assert killer[0].killed is not None and len(cluster.cluster.worker_nodes) == 1  # type: ignore[attr-defined]
    assert result["status"] == "done" and result["total"] == 6 and len(result["runs"]) == 6
    study = StudyRecord(result["study_dir"])
    planned = sorted(itertools.product(PROMPTS, range(3)))
    assert sorted(_keys(study)) == planned  # nothing lost
    assert sorted(_done_on_disk(study)) == planned  # nothing made twice, nothing left half-made
    (note,) = _notes(study)
    assert "was lost while making" in note and "made again on another worker" in note

    events: list[dict[str, Any]] = []
    again = run_sweep(study_dir=result["study_dir"], ray=cluster.address, on_progress=events.append)
    assert again["status"] == "done" and len(again["runs"]) == 6
    assert not [e for e in events if e["event"] == "sweep_progress"]  # nothing missing: nothing made
    assert sorted(_done_on_disk(StudyRecord(result["study_dir"]))) == planned


def test_a_sweep_that_loses_every_node_stops_and_its_resume_makes_only_what_is_missing(
        cluster: RayCluster, runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep_ray, "WAIT_FOR_WORKER_S", 3.0)
    cluster.add_node()
    killer: list[threading.Thread] = []

    def kill_after_two(event: dict[str, Any]) -> None:
        if event["event"] == "sweep_progress" and event["done"] == 2:
            killer.append(cluster.kill_when_a_run_starts())

    with pytest.raises(GhostError, match=r"^no Ray worker left, and none came up in 3 s; .*resume the sweep"):
        run_sweep(PROMPTS, "0-2", source="demo", steps=3, runs_dir=runs_dir, ray=cluster.address,
                  on_progress=kill_after_two)
    killer[0].join(timeout=60)
    (study_dir,) = [p for p in runs_dir.iterdir() if p.name.startswith("sweep-")]
    study = StudyRecord(study_dir)
    made_before = _keys(study)
    assert len(made_before) == 2 and sorted(_done_on_disk(study)) == sorted(made_before)
    assert study.status in ("failed", "interrupted")

    cluster.add_node()  # the cluster is back
    events: list[dict[str, Any]] = []
    resumed = run_sweep(study_dir=study_dir, ray=cluster.address, on_progress=events.append)
    made_now = [(e["prompt"], e["seed"]) for e in events if e["event"] == "sweep_progress"]
    planned = sorted(itertools.product(PROMPTS, range(3)))
    assert sorted(made_now) == sorted(set(planned) - set(made_before))  # only what was missing
    assert resumed["status"] == "done" and len(resumed["runs"]) == 6
    study = StudyRecord(study_dir)
    assert sorted(_keys(study)) == planned and sorted(_done_on_disk(study)) == planned


def test_a_poisoned_device_restarts_its_worker_and_an_out_of_memory_is_reported_after_one_restart(
        cluster: RayCluster, runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep_ray, "WORKER", FlakyDeviceWorker)
    cluster.add_node()
    result = run_sweep([PROMPTS[0], OOM_PROMPT], "0", source="demo", steps=2, runs_dir=runs_dir,
                       ray=cluster.address)
    assert result["status"] == "done" and result["total"] == 2
    by_prompt = {run["prompt"]: run for run in result["runs"]}
    # The CUDA error was the first worker's: a fresh worker made the run, healthy.
    assert by_prompt[PROMPTS[0]]["status"] == "done" and by_prompt[PROMPTS[0]]["verdict"]["label"] == "ok"
    # Out of memory on a fresh worker too: recorded failed with its error, in one line, after one restart.
    failed = by_prompt[OOM_PROMPT]
    assert failed["status"] == "failed" and result["failed"] == 1
    assert failed["error"].startswith("OutOfMemoryError: CUDA out of memory")
    assert failed["error"].endswith("(again after its Ray worker was restarted)") and "\n" not in failed["error"]
    study = StudyRecord(result["study_dir"])
    notes = _notes(study)
    assert len(notes) == 3, notes
    assert "CUDA error: an illegal memory access" in notes[0] and "restarted and the run made again" in notes[0]
    assert "OutOfMemoryError" in notes[1] and "restarted and the run made again" in notes[1]
    assert "again on a restarted Ray worker: recorded failed" in notes[2]
    # The first attempts' records were replaced by their retries: one record a run.
    assert sorted(RunRecord(p).settings["prompt"] for p in study.runs_dir.iterdir()) == sorted(by_prompt)

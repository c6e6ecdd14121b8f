"""SIGKILL the engine process at random points of demo runs and check what survives (not part of `make test`;
tests/record/test_interrupted.py runs a short version).

Each kill: start `python -m ghostviewer.engine.server`, load the demo, start a run over the JSON-lines protocol,
kill -9 the engine after a random number of step events (plus a random few milliseconds), then check the run's
record: it opens, every step whose event arrived before the kill is there with its stats and tensors, the steps
are 0..n-1 with no gap, and the run reads `interrupted` (or `done`, when the kill came after the end). A fresh
engine is started for the next kill, as the GUI's "Restart engine" does. At the end `ghostviewer doctor` folds
the write-ahead logs back in and the records must read the same.

    python scripts/kill_test.py [--kills 20] [--steps 12] [--seed 0] [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ghostviewer.cli_doctor import doctor  # noqa: E402
from ghostviewer.record import RecordError, RunRecord  # noqa: E402


class Engine:
    """The engine process, spoken to as the GUI does; events are read on a thread so waits can time out."""

    def __init__(self) -> None:
        env = {**os.environ, "GHOSTVIEWER_ENGINE_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", "ghostviewer.engine.server"], cwd=ROOT, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True)
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def send(self, **command: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def until(self, *names: str, timeout: float = 180.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            event = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            if event is None:
                raise RuntimeError(f"the engine exited while waiting for {names}")
            if event["event"] in names:
                return event

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def kill_once(runs_dir: Path, after_steps: int, jitter_s: float, steps: int, seed: int) -> dict[str, Any]:
    """One engine, one run, one SIGKILL after `after_steps` step events (+ jitter); what the record kept."""
    engine = Engine()
    try:
        engine.until("ready")
        engine.send(cmd="load", id=1, source="demo", device="cpu")
        engine.until("loaded")
        engine.send(cmd="run", id=2, runs_dir=str(runs_dir),
                    settings={"prompt": "a red circle on a blue background", "seed": seed, "steps": steps})
        seen: list[int] = []
        ended = None
        while len(seen) < after_steps and ended is None:
            event = engine.until("step", "finished", "failed", "cancelled")
            if event["event"] == "step":
                seen.append(int(event["step"]))
            else:
                ended = event["event"]
        time.sleep(jitter_s)
        while not engine.events.empty():  # steps reported in the meantime were committed too
            event = engine.events.get_nowait()
            if event and event["event"] == "step":
                seen.append(int(event["step"]))
    finally:
        engine.kill()
    return {"after_steps": after_steps, "jitter_s": round(jitter_s, 4), "seen": seen, "ended": ended,
            **check_record(runs_dir, seen)}


def check_record(runs_dir: Path, seen: list[int]) -> dict[str, Any]:
    """Open the run the kill left (if any) and check it; 'problem' says what is wrong (None: nothing)."""
    folders = [p for p in runs_dir.iterdir() if p.is_dir()]
    if not folders:
        return {"record": "none", "status": None, "steps": 0, "lost": len(seen),
                "problem": "steps were reported but no run folder exists" if seen else None}
    try:
        record = RunRecord(folders[0])
        status = record.status
        summary = record.summary()
        indices = [s.index for s in record.steps()]
        for index in indices:
            if not record.stats(phase="denoise", step=index):
                return _bad(status, indices, seen, f"step {index} has no stats")
            if "latents" not in record.step_tensors(index):
                return _bad(status, indices, seen, f"step {index} has no latents")
        record.events()
    except RecordError as exc:
        created = (folders[0] / "run.sqlite").is_file()
        problem = None if not seen else f"unreadable: {exc}"  # killed while the record was being created
        return {"record": "unreadable" if created else "empty folder", "status": None, "steps": 0,
                "lost": len(seen), "problem": problem, "error": str(exc)}
    lost = len(set(seen) - set(indices))
    if indices != list(range(len(indices))):
        return _bad(status, indices, seen, f"steps are not 0..n-1: {indices}")
    if lost:
        return _bad(status, indices, seen, f"{lost} reported step(s) missing")
    if status not in ("interrupted", "done") or summary["status"] != status:
        return _bad(status, indices, seen, f"status {status!r} (summary {summary['status']!r})")
    return {"record": "readable", "status": status, "steps": len(indices), "lost": 0, "problem": None,
            "run_dir": str(folders[0])}


def _bad(status: str, indices: list[int], seen: list[int], problem: str) -> dict[str, Any]:
    return {"record": "readable", "status": status, "steps": len(indices), "lost": len(set(seen) - set(indices)),
            "problem": problem}


def kill_points(kills: int, steps: int, rng: random.Random) -> list[tuple[int, float]]:
    """Spread over the run: right after the run command, after each step, and past the end (an idle engine)."""
    return [(rng.randint(0, steps + 1), rng.uniform(0.0, 0.05)) for _ in range(kills)]


def run_kills(root: Path, kills: int, steps: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    results = []
    for number, (after, jitter) in enumerate(kill_points(kills, steps, rng)):
        runs_dir = root / f"kill-{number:02d}"
        runs_dir.mkdir(parents=True)
        result = kill_once(runs_dir, after, jitter, steps, seed=number)
        results.append(result)
        problem = f", {result['problem']}" if result["problem"] else ""
        print(f"kill {number + 1}/{kills}: after {after} step events: {result['record']}, {result['status']}, "
              f"{result['steps']} steps kept, {result['lost']} lost{problem}", file=sys.stderr)
    repaired = doctor_all(root, results)
    readable = sum(r["record"] == "readable" for r in results)
    return {
        "kills": kills,
        "records_readable": readable,
        "no_record_yet": sum(r["record"] in ("none", "empty folder") for r in results),
        "interrupted": sum(r["status"] == "interrupted" for r in results),
        "done_before_kill": sum(r["status"] == "done" for r in results),
        "steps_kept": sum(r["steps"] for r in results),
        "steps_lost": sum(r["lost"] for r in results),
        "problems": [r["problem"] for r in results if r["problem"]] + repaired["problems"],
        "doctor": repaired["counts"],
        "results": results,
    }


def doctor_all(root: Path, results: list[dict[str, Any]]) -> dict[str, Any]:
    """`ghostviewer doctor` on each kill's runs folder: interrupted runs become single files reading the same."""
    counts: dict[str, int] = {}
    problems = []
    for number, result in enumerate(results):
        found = doctor(root / f"kill-{number:02d}")
        for key, value in found.items():
            if isinstance(value, int):
                counts[key] = counts.get(key, 0) + value
        if result.get("run_dir"):
            folder = Path(result["run_dir"])
            record = RunRecord(folder)
            if record.status != result["status"] or len(record.steps()) != result["steps"]:
                problems.append(f"{folder.name} changed after doctor")
            if (folder / "run.sqlite-wal").exists():
                problems.append(f"{folder.name} still has a write-ahead log after doctor")
    return {"counts": counts, "problems": problems}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", metavar="DIR", help="keep the killed runs here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ghostviewer-kill-"))
    try:
        report = run_kills(root, args.kills, args.steps, args.seed)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "results"}, indent=2))
    else:
        print(f"kills {report['kills']}: records readable {report['records_readable']} "
              f"(+{report['no_record_yet']} killed before the record existed), interrupted {report['interrupted']}, "
              f"done before the kill {report['done_before_kill']}, steps kept {report['steps_kept']}, "
              f"steps lost {report['steps_lost']}, problems {len(report['problems'])}; doctor: {report['doctor']}")
        for problem in report["problems"]:
            print(f"  problem: {problem}")
    return 1 if report["problems"] or report["steps_lost"] else 0


if __name__ == "__main__":
    sys.exit(main())

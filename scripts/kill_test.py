"""SIGKILL the engine process at random points of demo runs and check what survives (not part of `make test`;
tests/record/test_interrupted.py runs a short version).

Each kill: start `python -m ghostviewer.engine.server`, load the demo, start a run over the JSON-lines protocol,
kill -9 the engine after a random number of step events (plus a random few milliseconds), then check the run's
record: it opens, every step whose event arrived before the kill is there with its stats and tensors, the steps
are 0..n-1 with no gap, and the run reads `interrupted` (or `done`, when the kill came after the end). A fresh
engine is started for the next kill, as the GUI's "Restart engine" does. At the end `ghostviewer doctor` folds
the write-ahead logs back in and the records must read the same.

With --gui the same kills go through the real main window (offscreen): runs are queued through the window's
controller and the window's own engine process is killed mid-run; the window must stay up, the job must end
failed with an "engine" reason, the history must show the run as incomplete, and Engine ▸ Restart engine must
bring the engine back — the run queued after the last kill must be done (tests/gui/live/test_gui_kill.py: 2 kills).

    python scripts/kill_test.py [--kills 20] [--steps 40] [--seed 0] [--keep DIR] [--json] [--gui]
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

from ghostviewer.cli.doctor import doctor  # noqa: E402
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


# -- through the GUI (--gui) ------------------------------------------------------------------------------
GUI_PROMPT = "a red circle on a blue background"


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    """Run the Qt event loop until predicate() holds; TimeoutError naming `what` after timeout_s."""
    from PySide6.QtTest import QTest

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        QTest.qWait(5)


def _engine_ready(window: Any) -> bool:
    state = window.state
    return state.engine.state == "ready" and state.pipeline.status == "loaded" and \
        state.controller.engine_state == "ready"


def gui_kill_once(window: Any, runs_dir: Path, after_steps: int, jitter_s: float, steps: int, seed: int,
                  timeout_s: float = 180.0) -> dict[str, Any]:
    """Queue one run through the window, SIGKILL its engine after `after_steps` steps reached the window (+
    jitter), and check the window, the job, the history and the record; then Restart engine."""
    state = window.state
    state.history.set_runs_dir(runs_dir)
    state.prompt.update(prompt=GUI_PROMPT, seed=seed, seed_locked=True, steps=steps, fault="")
    job = state.controller.queue_run()
    seen: list[int] = []  # steps the window was told about: committed before the engine said so
    died: list[str] = []

    def on_step(job_id: int, count: int) -> None:
        if job_id == job.id:
            seen.append(count - 1)

    scheduler = state.controller.scheduler
    scheduler.jobStepped.connect(on_step)
    state.engine.sigEngineDied.connect(died.append)
    try:
        _wait(lambda: job.finished or (job.status == "running" and len(seen) >= after_steps), timeout_s,
              f"{after_steps} steps of the run")
        end = time.monotonic() + jitter_s
        _wait(lambda: time.monotonic() >= end or job.finished, timeout_s, "the jitter")
        killed = not job.finished
        if killed:
            os.kill(int(state.engine.pid), signal.SIGKILL)
            _wait(lambda: job.finished and died, timeout_s, "the window to notice the engine died")
    finally:
        scheduler.jobStepped.disconnect(on_step)
        state.engine.sigEngineDied.disconnect(died.append)
    problems = []
    if not window.isVisible():
        problems.append("the window went away")
    if killed and not (job.status == "failed" and job.ended_by == "engine" and "engine" in (job.error or "")):
        problems.append(f"the job ended {job.status} ({job.ended_by}: {job.error}), not failed for the engine")
    result = {"after_steps": after_steps, "jitter_s": round(jitter_s, 4), "seen": seen, "killed": killed,
              "ended": job.status, "ended_by": job.ended_by, "job_error": job.error, **check_record(runs_dir, seen)}
    if job.run_dir and result["record"] == "readable":
        state.history.refresh()
        entry = state.history.entry(job.run_dir)
        shown = entry.state(state.history.live_run) if entry is not None else None
        if killed and shown != "incomplete":
            problems.append(f"the history shows the killed run as {shown!r}, not 'incomplete'")
    shown_run = state.timeline.run_dir
    if killed and job.run_dir and shown_run and Path(shown_run) == Path(job.run_dir) and \
            window.timeline_bar.badge.kind != "incomplete":
        problems.append(f"the timeline's badge reads {window.timeline_bar.badge.kind!r}, not 'incomplete'")
    if killed and "engine process stopped" not in (state.reporter.last_message or ""):
        problems.append(f"the window said {state.reporter.last_message!r}, not that the engine process stopped")
    if killed and result["status"] not in (None, "interrupted"):
        problems.append(f"the killed run reads {result['status']!r}, not 'interrupted'")
    if result["problem"]:
        problems.append(result["problem"])
    result["problem"] = "; ".join(problems) or None
    window.actions.restart_engine.trigger()  # Engine ▸ Restart engine
    _wait(lambda: _engine_ready(window), timeout_s, "the restarted engine to load the pipeline")
    return result


def gui_kills(root: Path, kills: int, steps: int, seed: int, timeout_s: float = 180.0,
              window: Any = None) -> dict[str, Any]:
    """The kill test through the real main window (offscreen): `kills` SIGKILLs mid-run, then one more run.
    `window`: a shown window whose engine is started (the suite's shared one), left open with a fresh engine;
    without it a window is made here and closed at the end."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("GHOSTVIEWER_ENGINE_THREADS", "1")
    from PySide6.QtWidgets import QApplication

    from ghostviewer.gui.app import create_window
    from ghostviewer.gui.app_settings import AppSettings

    app = QApplication.instance() or QApplication(["ghostviewer-kill-test"])
    root.mkdir(parents=True, exist_ok=True)
    own_window = window is None
    if own_window:
        window = create_window(AppSettings(root / "settings.ini"), dialogs=False)
        window.show()
        window.state.controller.start_engine()
    state = window.state
    rng = random.Random(seed)
    results: list[dict[str, Any]] = []
    after: dict[str, Any] = {}
    try:
        _wait(lambda: _engine_ready(window), timeout_s, "the engine to load the demo pipeline")
        for number in range(kills):  # mid-run: from right after the run command to the step before the last
            point, jitter = rng.randint(0, max(0, steps - 2)), rng.uniform(0.0, 0.02)
            runs_dir = root / f"kill-{number:02d}"
            runs_dir.mkdir(parents=True)
            result = gui_kill_once(window, runs_dir, point, jitter, steps, seed=number, timeout_s=timeout_s)
            results.append(result)
            problem = f", {result['problem']}" if result["problem"] else ""
            print(f"gui kill {number + 1}/{kills}: after {point} steps: job {result['ended']} ({result['ended_by']}), "
                  f"{result['record']}, {result['status']}, {result['steps']} steps kept, {result['lost']} lost"
                  f"{problem}", file=sys.stderr)
        state.history.set_runs_dir(root / "after")
        state.prompt.update(prompt=GUI_PROMPT, seed=seed, seed_locked=True, steps=steps, fault="")
        job = state.controller.queue_run()
        _wait(lambda: job.finished, timeout_s, "the run after the restart")
        status = RunRecord(job.run_dir).status if job.run_dir else None
        after = {"job": job.status, "record": status, "window_up": window.isVisible(),
                 "problem": None if job.status == "done" and status == "done" else
                 f"the run after the restart ended {job.status} ({job.error}), record {status!r}"}
    finally:
        if own_window:
            state.controller.shutdown()
            window.close()
        app.processEvents()
    repaired = doctor_all(root, results)
    problems = [r["problem"] for r in results if r["problem"]] + ([after["problem"]] if after.get("problem") else [])
    return {
        "kills": sum(r["killed"] for r in results),
        "runs_ended_before_the_kill": sum(not r["killed"] for r in results),
        "window_up": after.get("window_up", False),
        "jobs_failed_for_the_engine": sum(r["ended"] == "failed" and r["ended_by"] == "engine" for r in results),
        "records_readable": sum(r["record"] == "readable" for r in results),
        "no_record_yet": sum(r["record"] in ("none", "empty folder") for r in results),
        "interrupted": sum(r["status"] == "interrupted" for r in results),
        "steps_kept": sum(r["steps"] for r in results),
        "steps_lost": sum(r["lost"] for r in results),
        "run_after_restart": after.get("job"),
        "problems": problems + repaired["problems"],
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
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", metavar="DIR", help="keep the killed runs here")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--gui", action="store_true", help="go through the real main window (offscreen)")
    args = parser.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ghostviewer-kill-"))
    try:
        report = (gui_kills if args.gui else run_kills)(root, args.kills, args.steps, args.seed)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "results"}, indent=2))
    elif args.gui:
        print(f"gui kills {report['kills']} (+{report['runs_ended_before_the_kill']} runs ended first): window up "
              f"{report['window_up']}, jobs failed for the engine {report['jobs_failed_for_the_engine']}, records "
              f"readable {report['records_readable']} (+{report['no_record_yet']} killed before the record existed), "
              f"interrupted {report['interrupted']}, steps kept {report['steps_kept']}, steps lost "
              f"{report['steps_lost']}, run after restart {report['run_after_restart']}, problems "
              f"{len(report['problems'])}; doctor: {report['doctor']}")
        for problem in report["problems"]:
            print(f"  problem: {problem}")
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

"""How responsive is the window? Two figures, printed at the end:

- launch: seconds from starting the GUI process to the window's first paint (goal ≤ 1.5 s);
- stall: the longest event-loop gap (a 1 ms QTimer measures the gaps) while a 20-step demo run updates the
  window every step — timeline following the live run, latent images, previews, plot (goal ≤ 30 ms).

    python benchmarks/gui_stall.py [--steps 20] [--runs 6] [--quiet 2.0 [--quiet-wait 600]]
    python benchmarks/gui_stall.py --source DIR --size 512 --steps 3 --runs 2   # a real-size pipeline folder

The first run warms up; the figure is the median over the others (5 by default; with --runs 1, that one run).
--source runs a pipeline folder instead of the demo (benchmarks/architectures.py builds real architectures) at
--size px; --run-timeout bounds each run (a real-size run on a CPU takes minutes). The load average is printed
with it: on a shared machine other processes' CPU use shows up as event-loop gaps (the GUI, the engine and
everyone else share the cores); --quiet LOAD waits (at most --quiet-wait seconds) for the 1-minute load average
to fall below LOAD first. Offscreen unless DISPLAY is set. Runs go to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

LAUNCH_GOAL_S, STALL_GOAL_MS = 1.5, 30.0


def _wait(predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Run the real event loop (not processEvents) until predicate() or the timeout."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop, poll = QEventLoop(), QTimer()
    poll.setInterval(5)
    poll.timeout.connect(lambda: loop.quit() if predicate() else None)
    deadline = QTimer(singleShot=True)
    deadline.timeout.connect(loop.quit)
    poll.start()
    deadline.start(int(timeout_s * 1000))
    if not predicate():
        loop.exec()
    poll.stop()
    return predicate()


def measure_run(state, timeout_s: float = 120) -> dict:  # noqa: ANN001 - AppState
    """Queue one run and record every gap between 1 ms timer ticks until it ends."""
    from PySide6.QtCore import Qt, QTimer

    gaps: list[float] = []
    last = [time.perf_counter()]
    updates = [0]

    long_gaps: list[tuple[float, float]] = []  # (seconds into the run when it ended, gap in ms) over the goal
    update_times: list[float] = []

    def tick() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        if gaps[-1] * 1000 > STALL_GOAL_MS:
            long_gaps.append((round(now - started, 2), round(1000 * gaps[-1], 1)))
        last[0] = now

    def on_steps(_count: int) -> None:
        updates[0] += 1
        update_times.append(round(time.perf_counter() - started, 2))

    state.timeline.stepsChanged.connect(on_steps)
    timer = QTimer()
    timer.setTimerType(Qt.TimerType.PreciseTimer)
    timer.setInterval(1)
    timer.timeout.connect(tick)
    started = time.perf_counter()
    timer.start()
    job = state.controller.queue_run()
    _wait(lambda: job.finished, timeout_s)
    timer.stop()
    state.timeline.stepsChanged.disconnect(on_steps)
    ordered = sorted(gaps) or [0.0]
    return {"status": job.status, "max_gap_ms": round(1000 * ordered[-1], 1),
            "p99_gap_ms": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 1),
            "window_updates": updates[0], "run_s": round(time.perf_counter() - started, 2),
            "gaps_over_goal": sorted(long_gaps, key=lambda g: -g[1])[:5], "updates_at_s": update_times[:50]}


def child(t0: float, workdir: Path, steps: int, runs: int, source: str = "demo", size: int = 0,
          run_timeout: float = 120) -> dict:
    from PySide6.QtCore import QEvent, QObject

    from ghostviewer.gui.app import application, create_window
    from ghostviewer.gui.app_settings import AppSettings

    class FirstPaint(QObject):
        at: float | None = None

        def eventFilter(self, _obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
            if self.at is None and event.type() in (QEvent.Type.Paint, QEvent.Type.Expose):
                self.at = time.time()
            return False

    app = application()
    window = create_window(AppSettings(workdir / "settings.ini"), dialogs=False)
    window.state.history.set_runs_dir(workdir / "runs")
    spy = FirstPaint()
    window.installEventFilter(spy)
    window.show()
    _wait(lambda: spy.at is not None, 10)
    launch_s = (spy.at or time.time()) - t0
    state = window.state
    state.pipeline.set_source(source)
    state.controller.start_engine()
    if not _wait(lambda: state.pipeline.status == "loaded", max(180, run_timeout)):
        return {"launch_s": launch_s, "error": f"pipeline not loaded: {state.pipeline.describe()}"}
    state.prompt.update(prompt="a red circle on a blue background", steps=steps, seed_locked=False, width=size,
                        height=size)
    results = [measure_run(state, run_timeout) for _ in range(runs)]
    state.controller.shutdown()
    window.close()
    app.processEvents()
    return {"launch_s": round(launch_s, 3), "runs": results}


def wait_for_quiet(load: float, timeout_s: float) -> float:
    """Sleep until the 1-minute load average is below `load` (or timeout_s passed); the seconds waited."""
    start = time.monotonic()
    while os.getloadavg()[0] >= load and time.monotonic() - start < timeout_s:
        time.sleep(5)
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description="GUI responsiveness: launch time and event-loop stalls")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=6, help="runs; the first one warms up")
    parser.add_argument("--quiet", type=float, help="wait for the 1-minute load average to fall below this")
    parser.add_argument("--quiet-wait", type=float, default=600.0, help="seconds to wait for --quiet at most")
    parser.add_argument("--source", default="demo", help="the pipeline: demo or a diffusers folder")
    parser.add_argument("--size", type=int, default=0, help="width and height in px (0: the pipeline's own)")
    parser.add_argument("--run-timeout", type=float, default=120.0, help="seconds each run may take")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print("RESULT " + json.dumps(child(args.child, args.workdir, args.steps, args.runs, args.source, args.size,
                                           args.run_timeout)), flush=True)
        return 0
    if args.quiet is not None and hasattr(os, "getloadavg"):
        waited = wait_for_quiet(args.quiet, args.quiet_wait)
        print(f"waited {waited:.0f} s for the load average to fall below {args.quiet}", file=sys.stderr)
    workdir = Path(tempfile.mkdtemp(prefix="ghostviewer-bench-"))
    env = dict(os.environ)
    if not env.get("DISPLAY"):
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    try:
        t0 = time.time()
        done = subprocess.run([sys.executable, __file__, "--child", repr(t0), "--workdir", str(workdir),
                               "--steps", str(args.steps), "--runs", str(args.runs), "--source", args.source,
                               "--size", str(args.size), "--run-timeout", str(args.run_timeout)],
                              capture_output=True, text=True, env=env,
                              timeout=600 + args.runs * args.run_timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        print(done.stdout + done.stderr, file=sys.stderr)
        return 1
    result = json.loads(line[len("RESULT "):])
    print(json.dumps(result, indent=2))
    launch = result["launch_s"]
    print(f"launch to visible window: {launch:.2f} s (goal ≤ {LAUNCH_GOAL_S} s)")
    measured = result.get("runs", [])[1:] or result.get("runs", [])
    if measured:
        gaps = sorted(r["max_gap_ms"] for r in measured)
        p99 = sorted(r["p99_gap_ms"] for r in measured)[len(measured) // 2]
        what = "" if args.source == "demo" else f" of {args.source} at {args.size or 'its own'} px"
        print(f"longest event-loop gap during a {args.steps}-step run{what}: median {gaps[len(gaps) // 2]:.1f} ms,"
              f" worst {gaps[-1]:.1f} ms over {len(gaps)} warm runs (goal ≤ {STALL_GOAL_MS} ms); p99 gap {p99:.1f} ms;"
              f" window updated {min(r['window_updates'] for r in measured)}+ times per run")
    if hasattr(os, "getloadavg"):
        print(f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

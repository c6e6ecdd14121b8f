"""How responsive is the window? Two figures, printed at the end:

- launch: seconds from starting the GUI process to the window's first paint (goal ≤ 1.5 s);
- stall: the longest event-loop gap (a 1 ms QTimer measures the gaps) while a 20-step demo run updates the
  window every step — timeline following the live run, latent images, previews, plot (goal ≤ 30 ms).

    python benchmarks/gui_stall.py [--steps 20] [--runs 6] [--quiet 2.0 [--quiet-wait 600]]
    python benchmarks/gui_stall.py --source DIR --size 512 --steps 3 --runs 2   # a real-size pipeline folder
    python benchmarks/gui_stall.py --replay RUN_DIR --steps 20 --runs 3          # a recorded run, played back

The first run warms up; the figure is the median over the others (5 by default; with --runs 1, that one run).
--source runs a pipeline folder instead of the demo (benchmarks/architectures.py builds real architectures) at
--size px; --run-timeout bounds each run (a real-size run on a CPU takes minutes). The load average is printed
with it: on a shared machine other processes' CPU use shows up as event-loop gaps (the GUI, the engine and
everyone else share the cores); --quiet LOAD waits (at most --quiet-wait seconds) for the 1-minute load average
to fall below LOAD first. Offscreen unless DISPLAY is set. Runs go to a temporary folder.

--replay RUN_DIR drives the window with benchmarks/replay_engine.py instead of the engine: a torch-free process that
writes that recorded run again, step by step (its rows, tensors and images; cycled to --steps), --step-s apart — the
window's own per-step cost on a real-size run (e.g. a 512 px SD 1.5-architecture run recorded once, which takes
minutes on a CPU), without torch competing for the cores. Per step: the longest gap between one step's arrival
and the next ("per step", median and worst). --profile FILE writes a cProfile of the window's thread over the
measured runs (pstats format).
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
    bursts: list[float] = []  # the window thread's own CPU time in each gap (time.thread_time): load-independent
    last = [time.perf_counter()]
    last_cpu = [time.thread_time()]
    updates = [0]

    long_gaps: list[tuple[float, float]] = []  # (seconds into the run when it ended, gap in ms) over the goal
    update_times: list[float] = []

    def tick() -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        gaps.append(now - last[0])
        bursts.append(cpu - last_cpu[0])
        if gaps[-1] * 1000 > STALL_GOAL_MS:
            long_gaps.append((round(now - started, 2), round(1000 * gaps[-1], 1), round(1000 * bursts[-1], 1)))
        last[0], last_cpu[0] = now, cpu

    step_marks: list[int] = []  # index into gaps when each step arrived

    def on_steps(_count: int) -> None:
        updates[0] += 1
        update_times.append(round(time.perf_counter() - started, 2))
        step_marks.append(len(gaps))

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
    bounds = [*step_marks, len(gaps)]
    spans = list(zip(bounds, bounds[1:], strict=False))
    per_step = sorted(round(1000 * max(gaps[a:b] or [0.0]), 1) for a, b in spans)
    per_step_cpu = sorted(round(1000 * max(bursts[a:b] or [0.0]), 1) for a, b in spans)
    step_cpu = sorted(round(1000 * sum(bursts[a:b]), 1) for a, b in spans)
    return {"status": job.status, "max_gap_ms": round(1000 * ordered[-1], 1),
            "per_step_max_gap_ms": {"median": per_step[len(per_step) // 2] if per_step else None,
                                    "worst": per_step[-1] if per_step else None, "steps": len(per_step)},
            "max_burst_ms": round(1000 * max(bursts or [0.0]), 1),
            "per_step_max_burst_ms": {"median": per_step_cpu[len(per_step_cpu) // 2] if per_step else None,
                                      "worst": per_step_cpu[-1] if per_step else None},
            "per_step_cpu_ms": {"median": step_cpu[len(step_cpu) // 2] if step_cpu else None,
                                "worst": step_cpu[-1] if step_cpu else None},
            "p99_gap_ms": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 1),
            "window_updates": updates[0], "run_s": round(time.perf_counter() - started, 2),
            "gaps_over_goal": sorted(long_gaps, key=lambda g: -g[1])[:8], "updates_at_s": update_times[:50]}


def child(t0: float, workdir: Path, steps: int, runs: int, source: str = "demo", size: int = 0,
          run_timeout: float = 120, replay: str = "", step_s: float = 1.0, profile: str = "") -> dict:
    from PySide6.QtCore import QEvent, QObject

    from ghostviewer.gui.app import application, create_window, settle_memory
    from ghostviewer.gui.app_settings import AppSettings
    from ghostviewer.gui.link.engine_client import EngineClient

    class FirstPaint(QObject):
        at: float | None = None

        def eventFilter(self, _obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
            if self.at is None and event.type() in (QEvent.Type.Paint, QEvent.Type.Expose):
                self.at = time.time()
            return False

    app = application()
    engine = None
    if replay:
        os.environ["GV_REPLAY_RECORD"], os.environ["GV_REPLAY_STEP_S"] = replay, str(step_s)
        engine = EngineClient(arguments=[str(Path(__file__).with_name("replay_engine.py"))])
    window = create_window(AppSettings(workdir / "settings.ini"), dialogs=False, engine=engine)
    settle_memory()  # as the app does (gui/app.py main): the window's objects out of the collector's full passes
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
    results = [measure_run(state, run_timeout)]  # the warm-up run
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    results += [measure_run(state, run_timeout) for _ in range(runs - 1)]
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
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
    parser.add_argument("--replay", default="", help="a recorded run folder, played back by a torch-free engine")
    parser.add_argument("--step-s", type=float, default=1.0, help="--replay: seconds between steps")
    parser.add_argument("--profile", default="", help="write a cProfile of the window's thread here")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print("RESULT " + json.dumps(child(args.child, args.workdir, args.steps, args.runs, args.source, args.size,
                                           args.run_timeout, args.replay, args.step_s, args.profile)), flush=True)
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
                               "--size", str(args.size), "--run-timeout", str(args.run_timeout),
                               "--replay", str(Path(args.replay).resolve()) if args.replay else "",
                               "--step-s", str(args.step_s),
                               "--profile", str(Path(args.profile).resolve()) if args.profile else ""],
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
        what = f" played back from {args.replay}" if args.replay else what
        print(f"longest event-loop gap during a {args.steps}-step run{what}: median {gaps[len(gaps) // 2]:.1f} ms,"
              f" worst {gaps[-1]:.1f} ms over {len(gaps)} warm runs (goal ≤ {STALL_GOAL_MS} ms); p99 gap {p99:.1f} ms;"
              f" window updated {min(r['window_updates'] for r in measured)}+ times per run")
        per_step = sorted(r["per_step_max_gap_ms"]["median"] or 0.0 for r in measured)
        print(f"longest gap after each step: median {per_step[len(per_step) // 2]:.1f} ms, worst"
              f" {max(r['per_step_max_gap_ms']['worst'] or 0.0 for r in measured):.1f} ms")
        bursts = sorted(r["per_step_max_burst_ms"]["median"] or 0.0 for r in measured)
        cpu = sorted(r["per_step_cpu_ms"]["median"] or 0.0 for r in measured)
        print(f"window thread's CPU (time.thread_time): longest burst between timer ticks after each step: median"
              f" {bursts[len(bursts) // 2]:.1f} ms, worst {max(r['max_burst_ms'] for r in measured):.1f} ms (the"
              f" whole run); per step in all: median {cpu[len(cpu) // 2]:.1f} ms")
    if hasattr(os, "getloadavg"):
        print(f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

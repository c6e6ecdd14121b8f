"""Does the window open a runs folder of 10,000 runs at once? (issue 31, "many runs"). Figures printed at the end:

- build: a folder of N small REAL run records (ghostviewer.record.RunWriter: settings, 2 steps of statistics and
  tensors, a 64×64 final image, a verdict), made once and reused (--folder);
- open: seconds from the shown window's history refresh (what app.main does after show) to the Runs history's
  first paint with rows in it (goal ≤ 1 s), how many rows it had, seconds until every row is in, and the longest
  event-loop stall until the first paint and then until every row is in (a 1 ms QTimer measures the gaps, as
  benchmarks/gui_stall.py does; goal ≤ 30 ms);
- filter: seconds to apply a history filter that matches about 1 run in 100 (goal ≤ 0.1 s), and until the filtered
  rows are painted (filter_painted_s: the view lays its rows out as it paints them);
- scroll: the longest stall while the history is scrolled from top to bottom, a page at a time;
- memory: the window process's resident memory after opening;
- record opens: how many run/study records were opened on the GUI thread and off it while the window opened and
  filled the history (the runs index, record/runs_index.py, should leave both near 0 once it is up to date);
- up_and_filled_s: seconds from creating the window to the history holding every row (goal ≤ 1 s).

    python benchmarks/many_runs.py [--runs 10000] [--folder /tmp/gv-10k] [--rebuild] [--no-index]

--no-index removes the folder's runs index first: the first open then reads every record (and writes the index).

Offscreen unless DISPLAY is set. The window is created without an engine (nothing runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

OPEN_GOAL_S, FILTER_GOAL_S, STALL_GOAL_MS = 1.0, 0.1, 30.0


def count_record_opens() -> dict[str, int]:
    """Counts of RunRecord/StudyRecord opens on the GUI (main) thread and on others, from now on."""
    import threading

    from ghostviewer.record.reader import RunRecord
    from ghostviewer.record.study_reader import StudyRecord

    counts = {"gui_thread": 0, "other_threads": 0}
    for cls in (RunRecord, StudyRecord):
        original = cls.__init__

        def counted(self, path, _original=original) -> None:  # noqa: ANN001 - the records' own signature
            main = threading.current_thread() is threading.main_thread()
            counts["gui_thread" if main else "other_threads"] += 1
            _original(self, path)

        cls.__init__ = counted
    return counts


def build(folder: Path, runs: int) -> float:
    """N real run records in `folder` (2 steps each); seconds taken."""
    from ghostviewer.record import RunWriter, StatRow, StepInfo
    from ghostviewer.record.runs_index import ensure

    folder.mkdir(parents=True, exist_ok=True)
    ensure(folder)  # the runs index a large folder's first listing makes: the writers keep it from the first run
    start = time.perf_counter()
    image = np.zeros((64, 64, 3), np.float32)
    image[..., 2] = 1.0
    for k in range(runs):
        seed = k % 1000
        prompt = f"a red circle on a blue background #{k // 1000}"
        writer = RunWriter.create(folder, {"prompt": prompt, "seed": seed, "steps": 2, "guidance": 7.5,
                                           "source": "demo", "device": "cpu"}, {"device": "cpu"},
                                  run_id=f"20261201-{k // 3600:02d}{k // 60 % 60:02d}{k % 60:02d}-{k:06x}")
        latents = np.full((4, 8, 8), 0.5, np.float32)
        for step in range(2):
            writer.add_stats([StatRow("denoise", step, "unet.mid_block", 0, step, (1, 4, 8, 8), "float32",
                                      -1.0, 1.0, 0.0, 0.3, 1.0, 0, 0)])
            writer.add_step(StepInfo(step, 999.0 - step, None, 0.01, 1, 1, None, "rss"), {"latents": latents}, {})
        writer.save_image("final", image)
        nan = k % 97 == 0
        writer.set_verdict({"label": "nan" if nan else "ok", "scores": {}},
                           {"phase": "denoise", "step": 1, "module": "unet.mid_block", "kind": "nan"} if nan else None)
        writer.finish("done", 0.1)
        if k and k % 1000 == 0:
            print(f"  built {k} runs ({time.perf_counter() - start:.0f} s)", flush=True)
    return time.perf_counter() - start


class StallMeter:
    """The longest gap between the ticks of a 1 ms timer (the event loop's longest stall)."""

    def __init__(self) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.gaps: list[float] = []
        self.last = time.perf_counter()
        self.timer = QTimer(timerType=Qt.TimerType.PreciseTimer, interval=1)
        self.timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.gaps.append(now - self.last)
        self.last = now

    def start(self) -> None:
        self.gaps, self.last = [], time.perf_counter()
        self.timer.start()

    def stop(self) -> float:
        self.timer.stop()
        return round(1000 * max(self.gaps, default=0.0), 1)


def spin(seconds: float, until=None) -> float:  # noqa: ANN001 - a predicate
    """Run the real event loop for `seconds` (or until `until()`); the seconds it took."""
    from PySide6.QtCore import QEventLoop, QTimer

    start = time.perf_counter()
    loop = QEventLoop()
    poll = QTimer(interval=2)
    poll.timeout.connect(lambda: loop.quit() if (until is not None and until()) or
                         time.perf_counter() - start > seconds else None)
    poll.start()
    loop.exec()
    poll.stop()
    return time.perf_counter() - start


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def measure(folder: Path, settings_dir: Path) -> dict:
    from PySide6.QtWidgets import QApplication

    from ghostviewer.gui.app import application, create_window
    from ghostviewer.gui.app_settings import AppSettings

    os.environ["GHOSTVIEWER_RUNS_DIR"] = str(folder)
    app = application()
    meter = StallMeter()
    painted: list[float] = []
    opens = count_record_opens()
    created = time.perf_counter()
    window = create_window(AppSettings(settings_dir / "settings.ini"), dialogs=False)
    window.resize(1366, 768)
    panel = window.history_panel
    history = window.state.history
    viewport = panel.tree.viewport()

    from PySide6.QtCore import QEvent, QObject

    paints: list[float] = []  # when the history's rows were painted (each paint)

    class PaintWatch(QObject):
        def eventFilter(self, obj, event):  # noqa: ANN001, ANN201, N802 - Qt's name
            if event.type() == QEvent.Type.Paint:
                paints.append(time.perf_counter())
                if panel.row_count() > 0 and not painted:
                    painted.append(time.perf_counter() - start)
            return False

    watch = PaintWatch()
    viewport.installEventFilter(watch)
    window.show()
    next(d for d in window.docks if d.windowTitle() == "Runs history").raise_()
    QApplication.processEvents()
    shown = time.perf_counter() - created
    spin(0.5)  # the window's own first show (benchmarks/gui_stall.py measures the launch)
    from PySide6.QtCore import QTimer

    start = time.perf_counter()
    meter.start()
    QTimer.singleShot(0, window.state.history.refresh)  # as app.main does after show()
    spin(120, lambda: bool(painted))
    open_stall = meter.stop()
    first_rows = panel.row_count()
    meter.start()
    spin(300, lambda: not getattr(history, "loading", False))
    all_s = time.perf_counter() - start
    record_opens = dict(opens)
    spin(1.0)
    after_stall = meter.stop()
    rows = panel.row_count()
    t = time.perf_counter()
    panel.filter.setText("nan")
    QApplication.processEvents()
    filter_s = time.perf_counter() - t
    spin(2.0, lambda: bool(paints) and paints[-1] > t)  # the view lays its rows out when it paints them next
    filter_painted_s = time.perf_counter() - t
    filter_rows = panel.shown_count()
    panel.filter.setText("")
    QApplication.processEvents()
    bar = panel.tree.verticalScrollBar()
    meter.start()
    for value in range(0, bar.maximum() + 1, max(bar.pageStep(), 1)):
        bar.setValue(value)
        spin(0.01)
    scroll_stall = meter.stop()
    figures = {"runs": len(history.entries), "rows": rows, "open_s": round(painted[0], 2) if painted else None,
               "first_paint_rows": first_rows, "all_rows_s": round(all_s, 2),
               "open_stall_ms": open_stall, "loading_stall_ms": after_stall, "filter_s": round(filter_s, 3),
               "filter_painted_s": round(filter_painted_s, 3),
               "filter_rows": filter_rows, "scroll_stall_ms": scroll_stall, "rss_mb": round(rss_mb()),
               "window_shown_s": round(shown, 2), "up_and_filled_s": round(shown + all_s, 2),
               "record_opens": record_opens}
    window.state.controller.shutdown()
    window.close()
    app.processEvents()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/ghostviewer-many-runs"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--no-index", action="store_true", help="remove the folder's runs index first")
    args = parser.parse_args()
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    folder = args.folder / f"runs-{args.runs}"
    if args.rebuild and folder.exists():
        shutil.rmtree(folder)
    from ghostviewer.record.runs_index import INDEX_FILES

    if not folder.exists() or sum(1 for p in folder.iterdir() if p.is_dir()) < args.runs:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"building {args.runs} runs in {folder}…", flush=True)
        print(f"built in {build(folder, args.runs):.0f} s")
    if args.no_index:
        for name in INDEX_FILES:
            (folder / name).unlink(missing_ok=True)
    settings = args.folder / "settings"
    shutil.rmtree(settings, ignore_errors=True)
    settings.mkdir(parents=True)
    figures = measure(folder, settings)
    print(figures)
    ok = figures["up_and_filled_s"] <= OPEN_GOAL_S and figures["filter_s"] <= FILTER_GOAL_S and max(
        figures["open_stall_ms"], figures["loading_stall_ms"], figures["scroll_stall_ms"]) <= STALL_GOAL_MS
    print(f"goals (window up and filled ≤ {OPEN_GOAL_S} s, filter ≤ {FILTER_GOAL_S} s, stalls ≤ {STALL_GOAL_MS} ms): "
          + ("met" if ok else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does the window open a runs folder of 10,000 runs as fast as one of 10? (issue 31, "many runs"). Both folders
are measured side by side in one process (after a first window made and closed, as a warm second launch; rounds
interleaved, the median round shown with the range). Figures printed at the end, per folder:

- build: a folder of N small REAL run records (ghostviewer.record.RunWriter: settings, 2 steps of statistics and
  tensors, a 64×64 final image, a verdict), made once and reused (--folder);
- window_made_s / window_made_cpu_s: creating the window (MainWindow and its docks: the fixed cost of any folder,
  its GUI-thread CPU beside it); window_shown_s: creating and showing the window; open_s: from creating it to the
  Runs history's first paint with rows in it; up_and_filled_s: to every row in the history, painted (goal ≤ 1 s,
  for both folders); cpu_s: the process's CPU time (all threads) meanwhile; first_paint_rows: the rows of that
  first paint;
- loading_stall_ms: the longest event-loop stall from the first paint with rows until all are in (a 1 ms QTimer
  measures the gaps, as benchmarks/gui_stall.py does; goal ≤ 30 ms);
- filter: seconds to apply a history filter that matches about 1 run in 100 (goal ≤ 0.1 s), and until the filtered
  rows are painted (filter_painted_s: the view lays its rows out as it paints them);
- scroll: the longest stall while the history is scrolled from top to bottom, a page at a time, and the GUI
  thread's CPU time to draw a page (median, maximum: the stall an idle machine would see);
- memory: the window process's resident memory after scrolling;
- record opens: how many run/study records were opened on the GUI thread and off it while the window opened and
  filled the history (the runs index, record/runs_index.py, should leave both at 0 once it is up to date);
- gui_cpu_s: the GUI thread's own CPU time until the history is filled (cpu_s less it: the history's worker and
  the other threads), a figure the machine's load changes less than the wall-clock ones;
- lines_made: the history rows whose words were made by then (a row's are made when it is drawn or read: the
  rows on screen, not 10,000).

    python benchmarks/many_runs.py [--runs 10000] [--small 10] [--rounds 3] [--folder /tmp/gv-10k] [--rebuild]
                                   [--no-index]

--no-index removes the large folder's runs index first: the first open then reads every record (and writes the
index). The sweep gallery at that size: benchmarks/many_runs_gallery.py.

Offscreen unless DISPLAY is set. The window is created without an engine (nothing runs)."""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

OPEN_GOAL_S, FILTER_GOAL_S, STALL_GOAL_MS = 1.0, 0.1, 30.0


_OPENS = {"gui_thread": 0, "other_threads": 0}
_COUNTING: list[bool] = []


def count_record_opens() -> dict[str, int]:
    """Counts of RunRecord/StudyRecord opens on the GUI (main) thread and on others, from now on (the counters are
    put on the records' __init__ once, and set back to 0 by each call)."""
    import threading

    from ghostviewer.record.reader import RunRecord
    from ghostviewer.record.study_reader import StudyRecord

    _OPENS.update(gui_thread=0, other_threads=0)
    if not _COUNTING:
        _COUNTING.append(True)
        for cls in (RunRecord, StudyRecord):
            original = cls.__init__

            def counted(self, path, _original=original) -> None:  # noqa: ANN001 - the records' own signature
                main = threading.current_thread() is threading.main_thread()
                _OPENS["gui_thread" if main else "other_threads"] += 1
                _original(self, path)

            cls.__init__ = counted
    return _OPENS


def write_run(folder: Path, k: int, prompt: str, seed: int, colour: tuple[float, float, float] = (0.0, 0.0, 1.0),
              nan: bool = False) -> Path:
    """One small REAL run record (settings, 2 steps of statistics and tensors, a 64×64 final image of one colour,
    a verdict) in `folder`; its run folder."""
    from ghostviewer.record import RunWriter, StatRow, StepInfo

    image = np.empty((64, 64, 3), np.float32)
    image[...] = colour
    writer = RunWriter.create(folder, {"prompt": prompt, "seed": seed, "steps": 2, "guidance": 7.5,
                                       "source": "demo", "device": "cpu"}, {"device": "cpu"},
                              run_id=f"20261201-{k // 3600:02d}{k // 60 % 60:02d}{k % 60:02d}-{k:06x}")
    latents = np.full((4, 8, 8), 0.5, np.float32)
    for step in range(2):
        writer.add_stats([StatRow("denoise", step, "unet.mid_block", 0, step, (1, 4, 8, 8), "float32",
                                  -1.0, 1.0, 0.0, 0.3, 1.0, 0, 0)])
        writer.add_step(StepInfo(step, 999.0 - step, None, 0.01, 1, 1, None, "rss"), {"latents": latents}, {})
    writer.save_image("final", image)
    writer.set_verdict({"label": "nan" if nan else "ok", "scores": {}},
                       {"phase": "denoise", "step": 1, "module": "unet.mid_block", "kind": "nan"} if nan else None)
    writer.finish("done", 0.1)
    return writer.path


def build(folder: Path, runs: int) -> float:
    """N real run records in `folder` (2 steps each); seconds taken."""
    from ghostviewer.record.runs_index import ensure

    folder.mkdir(parents=True, exist_ok=True)
    ensure(folder)  # the runs index a large folder's first listing makes: the writers keep it from the first run
    start = time.perf_counter()
    for k in range(runs):
        write_run(folder, k, f"a red circle on a blue background #{k // 1000}", k % 1000, nan=k % 97 == 0)
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


def open_window(folder: Path, settings_dir: Path, size: tuple[int, int] = (1366, 768)) -> tuple[object, dict]:
    """A window on `folder` made as app.main makes it (shown, then the history's refresh at the next turn of the
    event loop), timed from its creation: window_shown_s, open_s (the history's first paint with rows in it),
    up_and_filled_s (every row in the history and painted), cpu_s (the process's CPU time, all threads, until
    then), the longest stall while the rows came in after the first paint, and the record opens meanwhile."""
    from PySide6.QtCore import QEvent, QObject, QTimer
    from PySide6.QtWidgets import QApplication

    from ghostviewer.gui.app import create_window
    from ghostviewer.gui.app_settings import AppSettings

    os.environ["GHOSTVIEWER_RUNS_DIR"] = str(folder)
    shutil.rmtree(settings_dir, ignore_errors=True)
    settings_dir.mkdir(parents=True)
    opens = count_record_opens()
    meter = StallMeter()
    painted: list[float] = []
    created, cpu, gui_cpu = time.perf_counter(), time.process_time(), time.thread_time()
    window = create_window(AppSettings(settings_dir / "settings.ini"), dialogs=False)
    made, made_cpu = time.perf_counter() - created, time.thread_time() - gui_cpu
    gc.freeze()  # what app.main does for its window (settle_memory: once a process; here once a window)
    window.resize(*size)
    panel, history = window.history_panel, window.state.history

    class PaintWatch(QObject):
        def eventFilter(self, obj, event):  # noqa: ANN001, ANN201, N802 - Qt's name
            if event.type() == QEvent.Type.Paint and panel.row_count() > 0:
                painted.append(time.perf_counter())
            return False

    watch = PaintWatch()
    panel.tree.viewport().installEventFilter(watch)
    window.show()
    next(d for d in window.docks if d.windowTitle() == "Runs history").raise_()
    QTimer.singleShot(0, history.refresh)  # as app.main does after show()
    QApplication.processEvents()
    shown = time.perf_counter() - created
    spin(120, lambda: bool(painted))
    first = painted[0] - created if painted else None
    first_rows = panel.row_count()
    meter.start()
    spin(300, lambda: not history.loading)
    filled_at = time.perf_counter()
    spin(2.0, lambda: painted[-1] >= filled_at)
    filled = painted[-1] - created
    cpu_s, gui_cpu_s = time.process_time() - cpu, time.thread_time() - gui_cpu
    stall = meter.stop()
    counted = dict(opens)
    lines = getattr(panel.rows.lines, "formatted", None)  # rows whose words were made (drawn or read)
    figures = {"runs": len(history.entries), "rows": panel.row_count(), "window_made_s": round(made, 2),
               "window_made_cpu_s": round(made_cpu, 2), "window_shown_s": round(shown, 2),
               "open_s": None if first is None else round(first, 2), "first_paint_rows": first_rows,
               "up_and_filled_s": round(filled, 2), "cpu_s": round(cpu_s, 2), "gui_cpu_s": round(gui_cpu_s, 2),
               "loading_stall_ms": stall, "lines_made": lines,
               "record_opens": counted}
    window._paint_watch = watch  # type: ignore[attr-defined]  # kept alive with the window
    return window, figures


def use_window(window, figures: dict) -> dict:  # noqa: ANN001 - a MainWindow
    """Filter and scroll the open window's history; its figures with filter_s, filter_painted_s, filter_rows,
    scroll_stall_ms, rss_mb."""
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication

    panel = window.history_panel
    paints: list[float] = []

    class PaintWatch(QObject):
        def eventFilter(self, obj, event):  # noqa: ANN001, ANN201, N802 - Qt's name
            if event.type() == QEvent.Type.Paint:
                paints.append(time.perf_counter())
            return False

    watch = PaintWatch()
    panel.tree.viewport().installEventFilter(watch)
    spin(0.5)
    t = time.perf_counter()
    panel.filter.setText("nan")
    QApplication.processEvents()
    filter_s = time.perf_counter() - t
    spin(2.0, lambda: bool(paints) and paints[-1] > t)  # the view lays its rows out when it paints them next
    filter_painted_s = time.perf_counter() - t
    filter_rows = panel.shown_count()
    panel.filter.setText("")
    QApplication.processEvents()
    spin(0.3)
    bar = panel.tree.verticalScrollBar()
    meter = StallMeter()
    meter.start()
    page_cpu = scroll_pages(bar)
    scroll_stall = meter.stop()
    panel.tree.viewport().removeEventFilter(watch)
    return {**figures, "filter_s": round(filter_s, 3), "filter_painted_s": round(filter_painted_s, 3),
            "filter_rows": filter_rows, "scroll_stall_ms": scroll_stall, **page_cpu, "rss_mb": round(rss_mb())}


def scroll_pages(bar) -> dict:  # noqa: ANN001 - a QScrollBar
    """Page `bar` from top to bottom, 10 ms between pages; the GUI thread's CPU time per page (each page drawn
    at once: what a stall costs on an idle machine, whatever the load of this one), its median and maximum."""
    from PySide6.QtWidgets import QApplication

    costs = []
    for value in range(0, bar.maximum() + 1, max(bar.pageStep(), 1)):
        cpu = time.thread_time()
        bar.setValue(value)
        QApplication.processEvents()  # the page drawn
        costs.append(1000 * (time.thread_time() - cpu))
        spin(0.01)
    costs.sort()
    return {"scroll_page_cpu_ms": (round(costs[len(costs) // 2], 1), round(costs[-1], 1)) if costs else None}


def close(window) -> None:  # noqa: ANN001 - a MainWindow
    from PySide6.QtWidgets import QApplication

    window.state.controller.shutdown()
    window.close()
    window.deleteLater()
    QApplication.processEvents()


def measure(folders: dict[str, Path], settings_dir: Path, rounds: int = 3) -> dict[str, dict]:
    """Each folder's window opened `rounds` times, the folders interleaved in one process (after one window made
    and closed to warm it up, as a second launch is); per folder the median round's figures (by up_and_filled_s),
    the range of up_and_filled_s, and the first round's filter and scroll figures."""
    from ghostviewer.gui.app import application

    application()
    close(open_window(next(iter(folders.values())), settings_dir)[0])  # imports, fonts, first-window costs
    results: dict[str, list[dict]] = {name: [] for name in folders}
    for k in range(rounds):
        for name, folder in folders.items():
            window, figures = open_window(folder, settings_dir)
            if k == 0:
                figures = use_window(window, figures)
            close(window)
            results[name].append(figures)
    out = {}
    for name, rows in results.items():
        ordered = sorted(rows, key=lambda f: f["up_and_filled_s"])
        median = dict(ordered[len(ordered) // 2])
        for key in ("filter_s", "filter_painted_s", "filter_rows", "scroll_stall_ms", "scroll_page_cpu_ms", "rss_mb"):
            median[key] = rows[0].get(key)
        median["up_and_filled_range_s"] = (ordered[0]["up_and_filled_s"], ordered[-1]["up_and_filled_s"])
        median["open_range_s"] = (min(r["open_s"] or 0 for r in rows), max(r["open_s"] or 0 for r in rows))
        out[name] = median
    return out


def ensure_folder(root: Path, runs: int, rebuild: bool = False) -> Path:
    folder = root / f"runs-{runs}"
    if rebuild and folder.exists():
        shutil.rmtree(folder)
    if not folder.exists() or sum(1 for p in folder.iterdir() if p.is_dir()) < runs:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"building {runs} runs in {folder}…", flush=True)
        print(f"built in {build(folder, runs):.0f} s")
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=10, help="the folder measured beside it")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/ghostviewer-many-runs"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--no-index", action="store_true", help="remove the large folder's runs index first")
    args = parser.parse_args()
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    folders = {str(n): ensure_folder(args.folder, n, args.rebuild) for n in (args.small, args.runs)}
    from ghostviewer.record.runs_index import INDEX_FILES

    if args.no_index:
        for name in INDEX_FILES:
            (folders[str(args.runs)] / name).unlink(missing_ok=True)
    print("load average before:", os.getloadavg(), f"({os.cpu_count()} cores)")
    figures = measure(folders, args.folder / "settings", args.rounds)
    print("load average after:", os.getloadavg())
    for name, f in figures.items():
        print(f"{name} runs: {f}")
    big = figures[str(args.runs)]
    ok = big["up_and_filled_s"] <= OPEN_GOAL_S and big["filter_s"] <= FILTER_GOAL_S and max(
        big["loading_stall_ms"], big["scroll_stall_ms"]) <= STALL_GOAL_MS
    print(f"side by side: up_and_filled_s {args.small} runs {figures[str(args.small)]['up_and_filled_s']} s, "
          f"{args.runs} runs {big['up_and_filled_s']} s")
    print(f"goals (window up and filled ≤ {OPEN_GOAL_S} s, filter ≤ {FILTER_GOAL_S} s, stalls ≤ {STALL_GOAL_MS} ms): "
          + ("met" if ok else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

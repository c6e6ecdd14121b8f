"""The sweep gallery with a sweep study of 10,000 runs (issue 31, "many runs"): a real sweep study (record/
StudyWriter) of P prompts × S seeds whose members are small REAL run records (benchmarks/many_runs.py's builder:
a 64×64 final image in each prompt's own colour; every seed ending in 7 a nan run), made once and reused.

Figures printed at the end:
- study_read_s: reading the study's index (StudyRecord.runs(), what the gallery reads) and history_row_s (the
  history's row of it with its 10,000 children, read on the history's worker); goal ≤ 1 s;
- window: up_and_filled_s for a runs folder holding the study (the history's row of it), gallery_open_s: from
  asking the window to open the study (what a click on its history row does) to the gallery drawn, gallery_filled_s
  to its runs in it (a large sweep's index is read on the model's worker), the GUI thread's CPU time meanwhile
  (gallery_open_gui_cpu_s), and the longest stall from the click to a second after;
- scroll: the grid, then the list, scrolled top to bottom a page at a time (10 ms between pages, as a person
  paging down does), then left to settle: the longest event-loop stall (goal ≤ 30 ms), the GUI thread's CPU time
  to draw a page (median, maximum: the stall an idle machine would see), images decoded and cached
  (goal: only those of cells drawn, the cache bounded), resident memory before and after (goal: flat).

    python benchmarks/many_runs_gallery.py [--prompts 100] [--seeds 100] [--folder /tmp/ghostviewer-many-runs]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from many_runs import (  # noqa: E402
    STALL_GOAL_MS,
    StallMeter,
    count_record_opens,
    open_window,
    rss_mb,
    scroll_pages,
    spin,
    write_run,
)


def colour_of(prompt_no: int) -> tuple[float, float, float]:
    return ((prompt_no * 37) % 100 / 100, (prompt_no * 61) % 100 / 100, (prompt_no * 83) % 100 / 100)


def build_study(root: Path, prompts: int, seeds: int) -> Path:
    """A finished sweep study of prompts × seeds real runs in root (made once: reused when complete)."""
    from ghostviewer.record import StudyRecord, StudyWriter

    done = [p for p in root.glob("sweep-*") if p.is_dir()] if root.exists() else []
    for path in done:
        try:
            if StudyRecord(path).status == "done" and len(StudyRecord(path).runs()) == prompts * seeds:
                return path
        except Exception:  # noqa: BLE001 - a half-made one from an interrupted build: made again
            pass
        shutil.rmtree(path)
    root.mkdir(parents=True, exist_ok=True)
    names = [f"a shape in colour {i}" for i in range(prompts)]
    study = StudyWriter.create(root, "sweep", {"seeds": f"0-{seeds - 1}", "prompts": names}, total=prompts * seeds)
    start = time.perf_counter()
    k = 0
    for i, prompt in enumerate(names):
        for seed in range(seeds):
            nan = seed % 10 == 7
            run = write_run(study.runs_dir, k, prompt, seed, colour_of(i), nan=nan)
            study.add_run(run, {"prompt": prompt, "seed": seed},
                          summary={"status": "done", "verdict": {"label": "nan" if nan else "ok"},
                                   "first_anomaly": {"phase": "denoise", "step": 1, "module": "unet.mid_block",
                                                     "kind": "nan"} if nan else None})
            k += 1
        study.set_progress(k)
        if i % 10 == 9:
            print(f"  built {k} runs ({time.perf_counter() - start:.0f} s)", flush=True)
    study.finish("done", {"summary": f"{prompts * seeds} runs"})
    return study.path


def study_reads(study: Path) -> dict:
    from ghostviewer.gui.models.history_scan import read_study
    from ghostviewer.record import StudyRecord

    t = time.perf_counter()
    runs = StudyRecord(study).runs()
    read_s = time.perf_counter() - t
    t = time.perf_counter()
    row = read_study(study)
    row_s = time.perf_counter() - t
    return {"study_runs": len(runs), "study_read_s": round(read_s, 3), "history_row_s": round(row_s, 3),
            "history_children": len(row.children)}


def scroll(view, gallery) -> dict:  # noqa: ANN001 - a QAbstractItemView and the SweepGallery
    """Page through `view` top to bottom; the longest stall, and the images decoded meanwhile."""
    images = gallery.model.images
    bar = view.verticalScrollBar()
    before, decoded = rss_mb(), images.decodes
    meter = StallMeter()
    meter.start()
    page_cpu = scroll_pages(bar)
    spin(1.0)  # the last page's images come in
    stall = meter.stop()
    return {"stall_ms": stall, **page_cpu, "decoded": images.decodes - decoded, "cached": len(images),
            "rss_before_mb": round(before), "rss_after_mb": round(rss_mb())}


def measure(root: Path, study: Path) -> dict:
    from PySide6.QtWidgets import QApplication

    from ghostviewer.gui.app import application
    from ghostviewer.gui.widgets.sweep_gallery import raise_dock

    application()
    window, figures = open_window(root, root.parent / "settings-gallery")
    opens = count_record_opens()
    dock = next(d for d in window.docks if d.windowTitle() == "Sweep gallery")
    gallery = dock.widget()
    meter = StallMeter()
    meter.start()
    t, gui_cpu = time.perf_counter(), time.thread_time()
    window.state.controller.studies.open_study(str(study))
    raise_dock(gallery, 380)
    QApplication.processEvents()
    grid_open_s = time.perf_counter() - t
    spin(60.0, lambda: not getattr(gallery.model, "loading", False))  # a large sweep is read on the model's worker
    filled_s, gui_cpu_s = time.perf_counter() - t, time.thread_time() - gui_cpu
    spin(1.0)
    open_stall = meter.stop()
    out = {"window": {k: figures[k] for k in ("up_and_filled_s", "cpu_s", "loading_stall_ms", "rows")},
           "gallery_open_s": round(grid_open_s, 3), "gallery_filled_s": round(filled_s, 3),
           "gallery_open_gui_cpu_s": round(gui_cpu_s, 3), "gallery_open_stall_ms": open_stall,
           "gallery_runs": gallery.model.rowCount(), "grid": (gallery.grid_model.rowCount(),
                                                                gallery.grid_model.columnCount())}
    out["grid_scroll"] = scroll(gallery.grid, gallery)
    gallery.set_view("list")
    spin(0.3)
    out["list_scroll"] = scroll(gallery.view, gallery)
    out["record_opens_while_scrolling"] = dict(opens)
    window.state.controller.shutdown()
    window.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/ghostviewer-many-runs"))
    args = parser.parse_args()
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    root = args.folder / f"sweep-{args.prompts}x{args.seeds}"
    study = build_study(root, args.prompts, args.seeds)
    print("load average before:", os.getloadavg())
    figures = {**study_reads(study), **measure(root, study)}
    print("load average after:", os.getloadavg())
    print(figures)
    stalls = max(figures["grid_scroll"]["stall_ms"], figures["list_scroll"]["stall_ms"])
    ok = figures["study_read_s"] <= 1.0 and figures["history_row_s"] <= 1.0 and stalls <= STALL_GOAL_MS
    print(f"goals (study read ≤ 1 s, gallery scroll stalls ≤ {STALL_GOAL_MS} ms): " + ("met" if ok else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

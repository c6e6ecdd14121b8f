"""The sweep gallery done as a user would (issue 10's "Done when"): the real window and engine, a list of 10 prompts
dropped on the window with seeds 0-9 and Ghost = nan-latents chosen in the prompt panel; once the sweep is done,
a screenshot of the window at 1366×768 with the Sweep gallery raised -> resources/readme/gui-sweep.png.

The demo's nan-latents fault fires on seeds ending in 7, so each prompt should fail 1 of 10 (seed 7) and the
gallery should show those ten runs standing out. Prints the figures: runs, failure rate per prompt, time.

    python scripts/sweep_screenshot.py [--steps 10] [--out resources/readme/gui-sweep.png]

Starts Xvfb :99 itself when DISPLAY is unset (see scripts/screenshots.py). Runs and settings go to a temporary
folder. Not part of `make test`: it takes a minute or two.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import OUT, demo_window, save, settle, wait_until  # noqa: E402

PROMPTS = [  # in the demo's words (shapes.py): its colours and shapes
    "a red circle on a blue background",
    "a green square on a white background",
    "a yellow star on a purple background",
    "a blue triangle on a yellow background",
    "a white circle on a black background",
    "an orange square on a green background",
    "a purple cross on a white background",
    "a black star on a yellow background",
    "a red triangle on a white background",
    "a blue cross on an orange background",
]


def choose_ghost(window, name: str) -> None:  # noqa: ANN001
    """Pick the ghost in the prompt panel's Ghost box, as a user would."""
    box = window.prompt_panel.fault
    wait_until(lambda: box.findData(name) >= 0, 60, f"the ghost {name} in the prompt panel")
    box.setCurrentIndex(box.findData(name))
    if window.state.prompt.fault != name:
        sys.exit(f"sweep_screenshot: choosing {name} in the Ghost box did not set it")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT / "gui-sweep.png")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--ghost", default="nan-latents")
    args = parser.parse_args()
    with demo_window("ghostviewer-sweep-shot-") as (_app, window):
        from ghostviewer.gui.models.sweep_model import FAILED

        state = window.state
        tmp = Path(os.environ["GHOSTVIEWER_RUNS_DIR"]).parent
        window.prompt_panel.steps.setValue(args.steps)
        choose_ghost(window, args.ghost)
        gallery = next(d for d in window.docks if d.windowTitle() == "Sweep gallery")
        gallery.widget().seeds.setText(args.seeds)
        listing = tmp / "prompts.txt"
        listing.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
        coordinator = state.opener.sweeps
        ended: list[str] = []
        coordinator.ended.connect(ended.append)
        start = time.monotonic()
        state.opener.open_path(listing)  # what MainWindow.dropEvent does with a dropped file
        wait_until(lambda: bool(ended), 900, "the sweep to finish")
        seconds = time.monotonic() - start
        view = gallery.widget()
        model = view.model
        window.resizeDocks([gallery], [400], Qt.Orientation.Vertical)
        gallery.show()
        gallery.raise_()
        settle(window, 0.5)
        failing = next(((r, c) for r in range(view.grid_model.rowCount()) for c in range(view.grid_model.columnCount())
                        if view.grid_model.index(r, c).data(FAILED)), None)
        if failing is not None:  # click the first failing thumbnail, as a user would: its run opens on top
            view.grid.scrollTo(view.grid_model.index(*failing))  # a narrow window scrolls the grid to it
            cell = view.grid.visualRect(view.grid_model.index(*failing)).center()
            QTest.mouseClick(view.grid.viewport(), Qt.MouseButton.LeftButton, pos=cell)
            wait_until(lambda: state.timeline.record is not None, 60, "the failing run to open")
        settle(window, 1.5)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        save(window.grab(), args.out)
        rows = model.stats.table("prompt")
        runs = sum(total for _key, _failed, total, _rate in rows)
        failed = sum(f for _key, f, _total, _rate in rows)
        print(f"sweep {ended[0]}: {runs} runs ({len(rows)} prompts x {args.seeds}), {failed} failed, "
              f"{seconds:.0f} s ({runs / max(seconds, 1e-9):.2f} runs/s), steps {args.steps}, ghost {args.ghost}")
        for key, f, total, rate in rows:
            print(f"  {100 * rate:3.0f} %  {f}/{total}  {key}")
        by_seed = {str(k): (f, total) for k, f, total, _rate in model.stats.table("seed")}
        print("  failing seeds: " + ", ".join(f"{k} ({f}/{t})" for k, (f, t) in by_seed.items() if f))
    return 0


if __name__ == "__main__":
    sys.exit(main())

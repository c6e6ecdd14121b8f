"""README screenshots of the real window on real demo runs: resources/readme/gui-main.png, gui-ghost.png and
gui-inside.png (block tree, stats heat map and feature maps on a ghost-lab fault), gui-attention.png,
gui-embeddings.png (prompt embeddings and the run's event log).

Run under a real X server (Xvfb) so fonts and styles are the ones users see:
    apt-get install -y xvfb libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1
    python scripts/screenshots.py            # starts Xvfb :99 itself when DISPLAY is unset
Runs go to a temporary folder; your runs and settings are not touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "resources" / "readme"
SIZE = (1400, 900)


def ensure_display() -> subprocess.Popen | None:
    if os.environ.get("DISPLAY") or os.environ.get("QT_QPA_PLATFORM") == "offscreen":
        return None
    if shutil.which("Xvfb") is None:
        sys.exit("screenshots: no DISPLAY and no Xvfb (apt-get install -y xvfb libxcb-cursor0 ...)")
    server = subprocess.Popen(["Xvfb", ":99", "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ["DISPLAY"] = ":99"
    time.sleep(1.0)
    return server


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    from PySide6.QtWidgets import QApplication

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"screenshots: timed out waiting for {what}")
        QApplication.processEvents()
        time.sleep(0.01)


def settle(seconds: float = 0.5) -> None:
    """Let the window process events (repaints, queued refreshes) for a moment."""
    from PySide6.QtWidgets import QApplication

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.01)


def run_and_wait(window, **prompt) -> object:  # noqa: ANN001
    state = window.state
    state.prompt.update(**prompt)
    job = state.controller.queue_run()
    wait_until(lambda: job.finished, 120, f"the run {prompt.get('prompt')!r}")
    return job


def inside_shot(window, path: Path) -> None:  # noqa: ANN001
    """A short prompt trips the fault in unet.down_blocks.1.attentions.0: capture it, run, jump to it."""
    state = window.state
    suspect = "unet.down_blocks.1.attentions.0"
    wait_until(lambda: state.blocks.block(suspect) is not None, 60, "the block list")
    state.blocks.set_capture(suspect, True)
    state.blocks.set_capture("unet.down_blocks.1.resnets.0", True)
    state.prompt.update(fault="short-prompt-attention")
    run_and_wait(window, prompt="red circle", seed=7, steps=20)
    state.prompt.update(fault="")
    docks = {d.windowTitle(): d for d in window.docks}
    for name in ("Pipeline", "Prompt", "Run queue"):  # make room: feature maps on the left
        docks[name].hide()
    window.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, docks["Feature maps"])
    docks["Blocks"].raise_()
    docks["Heat map"].raise_()
    window.resizeDocks([docks["Feature maps"], docks["Heat map"]], [400, 560], Qt.Orientation.Horizontal)
    window.resizeDocks([docks["Blocks"], docks["Heat map"]], [250, 560], Qt.Orientation.Vertical)
    window.state.controller.jump_to_first_anomaly()
    state.blocks.select("unet.down_blocks.1.resnets.0")  # the healthy block just before the ghost
    settle(1.0)
    window.grab().save(str(path))
    print(f"wrote {path}")


def attention_shot(window, path: Path) -> None:  # noqa: ANN001
    """A healthy run with attention capture: each prompt token's cross-attention over the run."""
    state = window.state
    docks = {d.windowTitle(): d for d in window.docks}
    state.blocks.clear_ticks()
    state.blocks.set_capture_attention(True)
    run_and_wait(window, prompt="a red circle on a blue background", seed=7, steps=20)
    state.blocks.set_capture_attention(False)
    window.tabifyDockWidget(docks["Feature maps"], docks["Attention"])
    docks["Attention"].raise_()
    window.attention.whole_run.setChecked(True)
    state.timeline.set_step(state.timeline.count - 1)
    settle(1.0)
    window.grab().save(str(path))
    print(f"wrote {path}")


def embeddings_shot(window, path: Path) -> None:  # noqa: ANN001
    """The last run's prompt tokens in 2-D (final hidden states) and its event log next to the app log."""
    docks = {d.windowTitle(): d for d in window.docks}
    window.tabifyDockWidget(docks["Attention"], docks["Embeddings"])
    docks["Embeddings"].raise_()
    docks["Run events"].raise_()
    window.embeddings.source.setCurrentText("final hidden states")
    settle(1.0)
    window.grab().save(str(path))
    print(f"wrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    server = ensure_display()
    tmp = Path(tempfile.mkdtemp(prefix="ghostviewer-shots-"))
    os.environ["GHOSTVIEWER_RUNS_DIR"] = str(tmp / "runs")
    try:
        from ghostviewer.gui.app import application, create_window
        from ghostviewer.gui.app_settings import AppSettings

        app = application()
        window = create_window(AppSettings(tmp / "settings.ini"), dialogs=False)
        window.resize(*SIZE)
        window.show()
        window.state.controller.start_engine()
        wait_until(lambda: window.state.pipeline.status == "loaded", 180, "the demo pipeline to load")
        run_and_wait(window, prompt="a yellow star on a purple background", seed=3, seed_locked=True, steps=20)
        run_and_wait(window, prompt="a green square on a white background", seed=11, steps=20)
        job = run_and_wait(window, prompt="a red circle on a blue background", seed=7, steps=20)
        window.state.timeline.set_step(12)
        window.state.controller.decode_step()
        wait_until(lambda: window.step_images.items["VAE decode"].image is not None, 60, "the decode")
        window.state.timeline.set_step(12)
        settle()
        args.out.mkdir(parents=True, exist_ok=True)
        window.grab().save(str(args.out / "gui-main.png"))
        print(f"wrote {args.out / 'gui-main.png'} (run {job.run_dir})")
        faults = [f["name"] for f in window.state.pipeline.faults]
        if "nan-latents" in faults:
            window.state.prompt.update(fault="nan-latents")  # poisons seeds ending in 7
            run_and_wait(window, prompt="a blue triangle on a yellow background", seed=17, steps=20)
            window.state.prompt.update(fault="")
            window.state.selection.set_stat("nan_count")
            window.state.timeline.set_step(1)
            settle()
            window.grab().save(str(args.out / "gui-ghost.png"))
            print(f"wrote {args.out / 'gui-ghost.png'}")
        if "short-prompt-attention" in faults:
            inside_shot(window, args.out / "gui-inside.png")
            attention_shot(window, args.out / "gui-attention.png")
            embeddings_shot(window, args.out / "gui-embeddings.png")
        window.close()
        app.processEvents()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if server is not None:
            server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())

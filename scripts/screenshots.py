"""README screenshots of the real window at 1366×768 on real demo runs, one per main view, in resources/readme/:

- gui-welcome.png    the first-run welcome tour, a panel in the left column (the guided hunt);
- gui-main.png       a healthy run: latents, previews, predicted x0, a VAE decode, the final image, the plot;
- gui-ghost.png      the nan-latents ghost after Ctrl+J: NaN from pipeline.prepare_latents at step 0;
- gui-vae.png        fp16-vae-overflow in float32: "ok · overflow", the heat map's dec column outlined;
- gui-inside.png     the short-prompt ghost: Blocks with its culprit marked and bypassed, heat map, feature maps;
- gui-attention.png  cross-attention per prompt token over the run;
- gui-embeddings.png prompt embeddings in 2-D and the run's searchable event log;
- gui-compare.png    Replay ×2 of an unseeded-noise run: not reproduced, the comparison at the first divergence;
- gui-bisect.png     bisection of the short-prompt ghost: the trail, the culprit selected in Blocks and heat map.

Each PNG is kept under 250 KB (a 256-colour palette when needed). Run under a real X server (Xvfb) so fonts
and styles are the ones users see:
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from PySide6.QtCore import QPoint, Qt

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "resources" / "readme"
# The window's size: 1366×768 for the README; GHOSTVIEWER_SHOT_SIZE=1280x720 checks the smaller laptop size.
SIZE = tuple(int(v) for v in os.environ.get("GHOSTVIEWER_SHOT_SIZE", "1366x768").lower().split("x"))
MAX_BYTES = 250_000


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


def settle(window, seconds: float = 0.6) -> None:  # noqa: ANN001
    """Let the window finish its background reads and process events (repaints, queued refreshes)."""
    from PySide6.QtWidgets import QApplication

    wait_until(lambda: window.state.step_data.idle and not window.heatmap.loading
               and not window.step_images.final_loading, 30, "the views to settle")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.01)


def save(image, path: Path) -> None:  # noqa: ANN001 - QImage or QPixmap
    """PNG, optimised; a 256-colour palette when the full-colour file would be too big for the README."""
    from PIL import Image

    image.save(str(path))
    if path.stat().st_size > MAX_BYTES:
        with Image.open(path) as full:
            small = full.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                                 dither=Image.Dither.NONE)
        small.save(path, optimize=True)
    print(f"wrote {path} ({path.stat().st_size // 1000} KB)")


def shoot(window, path: Path) -> None:  # noqa: ANN001
    settle(window)
    save(window.grab(), path)


def docks(window) -> dict:  # noqa: ANN001
    return {d.windowTitle(): d for d in window.docks}


def run_and_wait(window, **prompt) -> object:  # noqa: ANN001
    state = window.state
    state.prompt.update(**prompt)
    job = state.controller.queue_run()
    wait_until(lambda: job.finished, 120, f"the run {prompt.get('prompt')!r}")
    return job


def welcome_shot(window, path: Path) -> None:  # noqa: ANN001
    """The welcome tour where it opens: a panel in the left column, beside the views it points at."""
    from ghostviewer.gui.dialogs.welcome import show_welcome

    panel = show_welcome(window)
    shoot(window, path)
    panel.close()
    window.reset_layout()


def main_shot(window, path: Path) -> None:  # noqa: ANN001
    state = window.state
    run_and_wait(window, prompt="a yellow star on a purple background", seed=3, seed_locked=True, steps=20)
    run_and_wait(window, prompt="a green square on a white background", seed=11, steps=20)
    run_and_wait(window, prompt="a red circle on a blue background", seed=7, steps=20)
    state.timeline.set_step(12)
    state.controller.decode_step()
    wait_until(lambda: window.step_images.items["VAE decode"].image is not None, 60, "the decode")
    state.timeline.set_step(12)
    shoot(window, path)


def ghost_shot(window, path: Path) -> None:  # noqa: ANN001
    """nan-latents (seeds ending in 7): the run, then Ctrl+J."""
    run_and_wait(window, prompt="a blue triangle on a yellow background", seed=17, steps=20, fault="nan-latents")
    window.heatmap.stat.setCurrentText("nan_count")
    settle(window)
    window.actions.jump_anomaly.trigger()
    window.state.timeline.set_step(1)
    shoot(window, path)


def vae_shot(window, path: Path) -> None:  # noqa: ANN001
    """A VAE fault: the image passes in float32 but the decoder overflows float16 — the dec column says so."""
    run_and_wait(window, prompt="a red circle on a blue background", seed=1, steps=10, fault="fp16-vae-overflow")
    window.heatmap.stat.setCurrentText("fp16_headroom")
    settle(window)
    window.actions.jump_anomaly.trigger()
    shoot(window, path)


def inside_shot(window, path: Path) -> None:  # noqa: ANN001
    """A short prompt trips unet.down_blocks.1.attentions.0: capture, run, Ctrl+J, then its bypass ticked."""
    state = window.state
    suspect = "unet.down_blocks.1.attentions.0"
    wait_until(lambda: state.blocks.block(suspect) is not None, 60, "the block list")
    state.blocks.set_capture(suspect, True)
    state.blocks.set_capture("unet.down_blocks.1.resnets.0", True)
    run_and_wait(window, prompt="red circle", seed=7, steps=20, fault="short-prompt-attention")
    d = docks(window)
    for name in ("Pipeline", "Run queue"):  # room for the feature maps on the left, the prompt stays
        d[name].hide()
    window.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, d["Feature maps"])
    window.splitDockWidget(d["Prompt"], d["Feature maps"], Qt.Orientation.Vertical)
    d["Blocks"].raise_()
    d["Heat map"].raise_()
    window.resizeDocks([d["Prompt"], d["Feature maps"]], [300, 400], Qt.Orientation.Vertical)
    window.resizeDocks([d["Blocks"], d["Heat map"]], [300, 400], Qt.Orientation.Vertical)
    settle(window)
    window.actions.jump_anomaly.trigger()
    state.blocks.set_bypass(suspect, True)  # the Run button now says so
    state.blocks.select("unet.down_blocks.1.resnets.0")  # the healthy block just before the ghost
    shoot(window, path)
    state.blocks.clear_ticks()
    state.prompt.update(fault="")
    window.reset_layout()


def attention_shot(window, path: Path) -> None:  # noqa: ANN001
    """A healthy run with attention capture: each prompt token's cross-attention over the run."""
    state = window.state
    d = docks(window)
    state.blocks.set_capture_attention(True)
    run_and_wait(window, prompt="a red circle on a blue background", seed=7, steps=20)
    state.blocks.set_capture_attention(False)
    d["Runs history"].hide()  # the attention maps get the whole right column
    d["Blocks"].hide()
    d["Attention"].raise_()
    window.attention.whole_run.setChecked(True)
    state.timeline.set_step(state.timeline.count - 1)
    shoot(window, path)


def embeddings_shot(window, path: Path) -> None:  # noqa: ANN001
    """The last run's prompt tokens in 2-D (final hidden states) and its event log."""
    d = docks(window)
    d["Embeddings"].raise_()
    d["Run events"].raise_()
    window.resizeDocks([d["Run events"]], [260], Qt.Orientation.Vertical)
    window.embeddings.source.setCurrentText("final hidden states")
    shoot(window, path)
    window.reset_layout()


def compare_shot(window, path: Path) -> None:  # noqa: ANN001
    """unseeded-noise: the run, then Replay ×2 — neither reproduces; the Compare dock opens where they part."""
    state = window.state
    c = state.controller
    run_and_wait(window, prompt="a red circle on a blue background", seed=4, seed_locked=True, steps=20,
                 fault="unseeded-noise")
    state.prompt.update(fault="")
    c.replay(times=2)
    wait_until(lambda: c.compare.comparison is not None, 180, "the comparison of the replays")
    settle(window, 1.5)
    shoot(window, path)


def bisect_shot(window, path: Path) -> None:  # noqa: ANN001
    """short-prompt-attention on "red circle": Bisect by bypass (Ctrl+B) — the trail ends on the culprit."""
    state = window.state
    run_and_wait(window, prompt="red circle", seed=7, seed_locked=True, steps=10, fault="short-prompt-attention")
    state.prompt.update(fault="")
    assert state.controller.bisect(), "the bisection did not start"
    bisects = state.controller.bisects
    wait_until(lambda: bisects.state == "idle", 300, "the bisection")
    docks(window)["Heat map"].raise_()
    settle(window, 1.5)
    shoot(window, path)


@contextmanager
def demo_window(prefix: str) -> Iterator[tuple[object, object]]:
    """(app, window): the real main window at SIZE on a display (Xvfb when none), with a fresh settings file and
    runs folder, its engine started and the demo pipeline loaded; everything is cleaned up afterwards."""
    server = ensure_display()
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["GHOSTVIEWER_RUNS_DIR"] = str(tmp / "runs")
    try:
        from ghostviewer.gui.app import application, create_window
        from ghostviewer.gui.app_settings import AppSettings

        app = application()
        window = create_window(AppSettings(tmp / "settings.ini"), dialogs=False)
        window.resize(*SIZE)
        window.move(QPoint(0, 0))
        window.show()
        window.state.controller.start_engine()
        wait_until(lambda: window.state.pipeline.status == "loaded", 180, "the demo pipeline to load")
        yield app, window
        window.close()
        app.processEvents()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if server is not None:
            server.terminate()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with demo_window("ghostviewer-shots-") as (_app, window):
        args.out.mkdir(parents=True, exist_ok=True)
        welcome_shot(window, args.out / "gui-welcome.png")
        main_shot(window, args.out / "gui-main.png")
        faults = {f["name"] for f in window.state.pipeline.faults}
        if "nan-latents" in faults:
            ghost_shot(window, args.out / "gui-ghost.png")
        if "fp16-vae-overflow" in faults:
            vae_shot(window, args.out / "gui-vae.png")
        window.state.prompt.update(fault="")
        if "unseeded-noise" in faults:  # before the shots that move docks about: Qt leaves stray tab bars
            compare_shot(window, args.out / "gui-compare.png")
        if "short-prompt-attention" in faults:
            bisect_shot(window, args.out / "gui-bisect.png")
            inside_shot(window, args.out / "gui-inside.png")
        attention_shot(window, args.out / "gui-attention.png")
        embeddings_shot(window, args.out / "gui-embeddings.png")
    return 0

if __name__ == "__main__":
    sys.exit(main())

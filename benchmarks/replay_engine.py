"""A torch-free engine process that plays a recorded run back into a new record, step by step, as the real engine
wrote it: the same statistics rows, tensors and images of each step (cycled when more steps are asked for than were
recorded), committed one step at a time, with the protocol's started / step / finished events. The window cannot
tell it from the engine, except that no torch competes for the cores: benchmarks/gui_stall.py --replay measures the
window's own per-step cost on a real-size run that took minutes to record once.

    GV_REPLAY_RECORD=RUN_DIR GV_REPLAY_STEP_S=0.5 python benchmarks/replay_engine.py   # the window starts it
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ghostviewer.engine.server import PROTOCOL_VERSION, Emitter, protocol_stream, read_commands
from ghostviewer.record import RunRecord, RunWriter


class ReplaySession:
    def __init__(self, emit: Emitter, source: RunRecord, step_s: float) -> None:
        self.emit, self.source, self.step_s = emit, source, step_s
        self.stop = threading.Event()
        self.modules = source.modules()

    def cancel(self, run_id: object = None) -> None:
        self.stop.set()

    def handle(self, command: dict[str, Any]) -> None:
        name, ident = command["cmd"], command.get("id")
        if name == "load":
            self.emit("loaded", id=ident, source=str(command.get("source")), kind="folder", device="cpu",
                      dtypes={"unet": "float32"}, pipeline="StableDiffusionPipeline", scheduler="ddim",
                      latent_channels=4)
        elif name == "blocks":
            blocks = [{"module": m, "kind": "Block", "bypassable": False} for m in self.modules if m.count(".") <= 3]
            self.emit("blocks", id=ident, blocks=blocks)
        elif name == "run":
            self.stop.clear()
            self.play(ident, Path(command["runs_dir"]), dict(command["settings"]))

    def play(self, ident: object, runs_dir: Path, asked: dict[str, Any]) -> None:
        source = self.source
        steps = int(asked.get("steps") or len(source.steps()))
        settings = {**source.settings, "steps": steps, "seed": asked.get("seed", source.settings.get("seed"))}
        writer = RunWriter.create(runs_dir, settings, source.environment)
        started = time.perf_counter()
        writer.add_stats(source.stats(phase="encode"))
        writer.commit()
        recorded = source.steps()
        images = {f["name"]: f["relpath"] for f in source.files() if f["kind"] == "image"}
        self.emit("started", id=ident, run_dir=str(writer.path), steps=steps)
        for step in range(steps):
            if self.stop.is_set():
                break
            info = recorded[step % len(recorded)]
            rows = [replace(row, step=step) for row in source.stats(phase="denoise", step=info.index)]
            writer.add_stats(rows)
            pictures = {}
            for name, relpath in images.items():
                prefix = f"step_{info.index:04d}_"
                if name.startswith(prefix) and not name.endswith("decoded"):  # the previews as PNG files
                    with Image.open(source.path / relpath) as image:
                        pictures[name[len(prefix):]] = np.asarray(image.convert("RGB"))
            writer.add_step(replace(info, index=step), source.step_tensors(info.index), pictures)
            self.emit("step", id=ident, run_dir=str(writer.path), step=step, steps=steps)
            time.sleep(self.step_s)
        if self.stop.is_set():
            writer.finish("cancelled", time.perf_counter() - started)
            self.emit("cancelled", id=ident, run_dir=str(writer.path))
            return
        writer.add_stats(source.stats(phase="decode"))
        final = source.image_path("final")
        if final is not None:
            with Image.open(final) as image:
                    writer.save_image("final", np.asarray(image.convert("RGB")))
        writer.set_verdict(source.verdict or {"label": "ok", "scores": {}}, source.first_anomaly)
        writer.finish("done", time.perf_counter() - started)
        self.emit("finished", id=ident, run_dir=str(writer.path), verdict=source.verdict or {"label": "ok"},
                  seed=settings.get("seed"), steps=steps)


def main() -> int:
    emit = Emitter(protocol_stream())
    session = ReplaySession(emit, RunRecord(os.environ["GV_REPLAY_RECORD"]),
                            float(os.environ.get("GV_REPLAY_STEP_S", "0.5")))
    commands: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=read_commands, args=(sys.stdin, commands, session, emit), daemon=True).start()
    emit("ready", pid=os.getpid(), protocol=PROTOCOL_VERSION, torch=None, threads=1, schedulers=["ddim"], faults=[])
    while True:
        command = commands.get()
        if command["cmd"] == "quit":
            return 0
        session.handle(command)


if __name__ == "__main__":
    sys.exit(main())

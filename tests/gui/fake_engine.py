"""A stand-in engine process speaking the real protocol (server.py's reader and emitter) with no torch: it
writes synthetic runs through the real RunWriter. `python -m tests.gui.fake_engine` — fast GUI tests.
FAKE_ENGINE_PROTOCOL: the protocol version its `ready` announces (the real one by default); FAKE_ENGINE_COMMANDS:
a file each command's name it receives is appended to."""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ghostviewer.engine.server import PROTOCOL_VERSION, Emitter, protocol_stream, read_commands
from tests.gui.fake_runs import MODULES, write_fake_run

STEP_DELAY_S = float(os.environ.get("FAKE_ENGINE_STEP_DELAY", "0.05"))


LONG_LOAD_ERROR = ("Error no file named diffusion_pytorch_model.safetensors found in directory "
                   + "/very/long/path/" * 20 + "unet.\nTraceback-like second line\n" + "x" * 2000)


class FakeSession:
    def __init__(self, emit: Emitter) -> None:
        self.emit = emit
        self.stop = threading.Event()
        self.quitting = threading.Event()  # 'quit' (or EOF) came: a run still queued behind it stops at once
        self.loaded: str | None = None

    def cancel(self, run_id: object = None) -> None:
        if run_id is None:  # the reader thread's cancel on 'quit' or EOF (a user's cancel names its run)
            self.quitting.set()
        self.stop.set()

    def handle(self, command: dict[str, Any]) -> None:
        name, ident = command["cmd"], command.get("id")
        if name == "load":
            if command.get("source") == "broken":
                self.emit("error", message="no pipeline here: broken", cmd="load", id=ident)
                return
            if command.get("source") == "broken-long":  # a library's raw text: long, several lines
                self.emit("error", message=LONG_LOAD_ERROR, cmd="load", id=ident)
                return
            self.loaded = str(command.get("source"))
            self.emit("loaded", id=ident, source=self.loaded, kind="demo", device="cpu",
                      dtypes={"unet": "float32"}, pipeline="FakePipeline", scheduler="ddim", latent_channels=4)
        elif name == "run":
            if not self.quitting.is_set():
                self.stop.clear()
            settings = dict(command["settings"])
            steps = int(settings.get("steps") or 5)
            started: list[str] = []

            def on_step(run_dir: Path, step: int) -> None:
                if not started:
                    started.append(str(run_dir))
                    self.emit("started", id=ident, run_dir=str(run_dir), steps=steps)
                self.emit("step", id=ident, run_dir=str(run_dir), step=step, steps=steps)
                time.sleep(STEP_DELAY_S)

            run_dir = write_fake_run(Path(command["runs_dir"]), steps=steps, seed=int(settings.get("seed") or 0),
                                     settings=settings, on_step=on_step, should_stop=self.stop.is_set)
            if self.stop.is_set():
                self.emit("cancelled", id=ident, run_dir=str(run_dir))
            else:
                self.emit("finished", id=ident, run_dir=str(run_dir), verdict={"label": "ok", "scores": {}},
                          seed=settings.get("seed"), steps=steps)
        elif name == "blocks":
            blocks = [{"module": m, "kind": "FakeBlock", "bypassable": m.endswith("mid_block")} for m in MODULES]
            self.emit("blocks", id=ident, blocks=blocks)
        elif name == "decode":
            run_dir, step = Path(command["run_dir"]), int(command["step"])
            source = run_dir / "images" / f"step_{step:04d}_preview.png"
            target = run_dir / "images" / f"step_{step:04d}_decoded.png"
            target.write_bytes(source.read_bytes())
            self.emit("decoded", id=ident, run_dir=str(run_dir), step=step, tensor="latents", path=str(target))


def main() -> int:
    emit = Emitter(protocol_stream())
    session = FakeSession(emit)
    commands: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=read_commands, args=(sys.stdin, commands, session, emit), daemon=True).start()
    protocol = int(os.environ.get("FAKE_ENGINE_PROTOCOL", PROTOCOL_VERSION))
    emit("ready", pid=os.getpid(), protocol=protocol, torch=None, threads=1, schedulers=["ddim", "euler"], faults=[])
    received = os.environ.get("FAKE_ENGINE_COMMANDS")
    while True:
        command = commands.get()
        if received:
            with open(received, "a", encoding="utf-8") as out:
                out.write(command["cmd"] + "\n")
        if command["cmd"] == "quit":
            return 0
        session.handle(command)


if __name__ == "__main__":
    sys.exit(main())

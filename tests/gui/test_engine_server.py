"""The engine process's pipe protocol, spoken directly (no Qt): JSON lines in, JSON lines out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo-pipeline" / "model_index.json"
pytestmark = pytest.mark.skipif(not DEMO.is_file(), reason="the demo pipeline is not built (resources/)")


class Pipe:
    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "ghostviewer.engine.server"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def send(self, **command: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def until(self, *names: str) -> list[dict]:
        """Events up to and including the first one named in `names`."""
        assert self.process.stdout is not None
        events = []
        for line in self.process.stdout:
            events.append(json.loads(line))  # every stdout line is protocol: library chatter goes to stderr
            if events[-1]["event"] in names:
                return events
        raise AssertionError(f"the engine exited before {names}: {events}")


@pytest.mark.slow
def test_protocol_round_trip(tmp_path: Path) -> None:
    pipe = Pipe()
    try:
        ready = pipe.until("ready")[-1]
        assert ready["schedulers"] and any(f["name"] == "nan-latents" for f in ready["faults"])
        pipe.send(cmd="frobnicate", id=1)
        assert pipe.until("error")[-1] == {"event": "error", "message": "unknown command 'frobnicate'",
                                          "cmd": "frobnicate", "id": 1}
        pipe.send(cmd="run", id=2, settings={"prompt": "x"}, runs_dir=str(tmp_path))
        assert "no pipeline is loaded" in pipe.until("failed")[-1]["error"]
        pipe.send(cmd="load", id=3, source="/nonexistent/pipeline")
        assert pipe.until("error")[-1]["id"] == 3
        pipe.send(cmd="load", id=4, source="demo")
        assert pipe.until("loaded")[-1]["pipeline"] == "StableDiffusionPipeline"
        pipe.send(cmd="run", id=5, settings={"prompt": "a red circle on a blue background", "seed": 1, "steps": 4},
                  runs_dir=str(tmp_path))
        events = pipe.until("finished", "failed")
        assert [e["event"] for e in events] == ["started", "step", "step", "step", "step", "finished"]
        assert all(e["id"] == 5 for e in events)
        run_dir = events[-1]["run_dir"]
        pipe.send(cmd="decode", id=6, run_dir=run_dir, step=3)
        decoded = pipe.until("decoded", "error")[-1]
        assert decoded["event"] == "decoded" and Path(decoded["path"]).is_file()
        pipe.send(cmd="cancel", run=7)  # before its run: that run stops at its first step
        pipe.send(cmd="run", id=7, settings={"prompt": "a", "seed": 2, "steps": 50}, runs_dir=str(tmp_path))
        assert pipe.until("cancelled", "finished")[-1]["event"] == "cancelled"
        pipe.send(cmd="quit")
        assert pipe.process.wait(timeout=30) == 0
    finally:
        pipe.process.kill()


def test_a_failed_load_keeps_the_working_pipeline(tmp_path: Path) -> None:
    pipe = Pipe()
    try:
        pipe.send(cmd="load", id=1, source="demo")
        assert pipe.until("loaded")[-1]["pipeline"] == "StableDiffusionPipeline"
        (tmp_path / "not-a-pipeline").mkdir()
        pipe.send(cmd="load", id=2, source=str(tmp_path / "not-a-pipeline"))
        assert pipe.until("error")[-1]["id"] == 2
        pipe.send(cmd="run", id=3, runs_dir=str(tmp_path / "runs"),
                  settings={"prompt": "a red circle", "steps": 2, "seed": 1})
        assert pipe.until("finished", "failed")[-1]["event"] == "finished"  # still the demo, loaded once
    finally:
        pipe.send(cmd="quit")
        pipe.process.wait(timeout=60)

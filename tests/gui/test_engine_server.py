"""The engine process's pipe protocol, spoken directly (no Qt): JSON lines in, JSON lines out."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
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


@pytest.fixture(scope="module")
def pipe() -> Iterator[Pipe]:
    """One engine process for the module (starting one costs ~8 CPU s: torch, diffusers, the demo); the first test
    sees it fresh. It must quit cleanly, exit status 0, when the module is done."""
    engine = Pipe()
    try:
        yield engine
        engine.send(cmd="quit")
        assert engine.process.wait(timeout=60) == 0
    finally:
        engine.process.kill()


@pytest.mark.slow
def test_protocol_round_trip(pipe: Pipe, tmp_path: Path) -> None:
    ready = pipe.until("ready")[-1]  # a fresh engine: nothing loaded yet
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


def test_a_failed_load_keeps_the_working_pipeline(pipe: Pipe, tmp_path: Path) -> None:
    pipe.send(cmd="load", id=11, source="demo")
    assert pipe.until("loaded")[-1]["pipeline"] == "StableDiffusionPipeline"
    (tmp_path / "not-a-pipeline").mkdir()
    pipe.send(cmd="load", id=12, source=str(tmp_path / "not-a-pipeline"))
    assert pipe.until("error")[-1]["id"] == 12
    pipe.send(cmd="run", id=13, runs_dir=str(tmp_path / "runs"),
              settings={"prompt": "a red circle", "steps": 2, "seed": 1})
    assert pipe.until("finished", "failed")[-1]["event"] == "finished"  # still the demo, loaded once

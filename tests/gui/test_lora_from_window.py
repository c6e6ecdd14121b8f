"""A REAL LoRA run made from the window: a LoRA file added to the prompt panel's list with a scale, Run queues the
spec with it as an adapter, and the engine's `run` command (an in-process EngineSession on the shared demo pipeline)
makes it: the record names the file with its sha256 and scale, the image differs from the plain run's, and the
pipeline the engine keeps is as before (the next plain run gives the plain image bit for bit)."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ghostviewer.record import RunRecord
from tests.engine.tiny_lora import lora_states, save_lora
from tests.gui.live_window import needs_demo

pytestmark = needs_demo


def _run(session: Any, out: io.StringIO, settings: dict[str, Any], runs_dir: Path) -> RunRecord:
    out.seek(0)
    out.truncate()
    session.handle({"cmd": "run", "id": 1, "settings": settings, "runs_dir": str(runs_dir)})
    (finished,) = [e for e in map(json.loads, out.getvalue().splitlines()) if e["event"] == "finished"]
    return RunRecord(finished["run_dir"])


def _pixels(record: RunRecord) -> np.ndarray:
    path = record.image_path("final")
    assert path is not None
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.int16)


def test_a_lora_run_from_the_window_is_recorded_and_unloaded(window, demo_loaded, gui_env: Path,  # noqa: ANN001
                                                             tmp_path: Path) -> None:
    from ghostviewer.engine.server import Emitter, EngineSession

    _zero, good = lora_states(demo_loaded.pipe.unet)
    lora = save_lora(good, tmp_path, "style.safetensors")
    state, panel = window.state, window.prompt_panel
    state.prompt.update(prompt="a red circle on a blue background", seed=3, seed_locked=True, steps=3)
    out = io.StringIO()
    session = EngineSession(Emitter(out))
    session.loaded = demo_loaded
    plain_job = state.controller.queue_run()
    assert plain_job is not None and "adapters" not in plain_job.settings
    plain = _run(session, out, plain_job.settings, gui_env)

    panel.inputs.loras.add_files([str(lora)])
    (row,) = panel.inputs.loras.rows
    row.scale.setValue(0.8)  # the row's own scale box, as a user sets it
    assert tuple(state.prompt.loras) == ((str(lora), 0.8),)
    job = state.controller.queue_run()
    assert job is not None and list(job.settings["adapters"]) == [f"{lora}:0.8"]
    made = _run(session, out, job.settings, gui_env)
    (recorded,) = made.environment["loras"]
    assert recorded["sha256"] == hashlib.sha256(lora.read_bytes()).hexdigest() and recorded["scale"] == 0.8
    assert np.abs(_pixels(made) - _pixels(plain)).max() > 0  # the LoRA changed the image

    row.remove.click()
    assert not state.prompt.loras
    again = _run(session, out, state.controller.queue_run().settings, gui_env)
    assert np.array_equal(_pixels(again), _pixels(plain))  # nothing stayed loaded

"""A REAL img2img run made from the window: an init image dropped on the prompt panel, the strength set on its
slider, Run queues the spec, and the engine's `run` command (an in-process EngineSession on the shared demo
pipeline, what the engine process runs for the window) makes it; its record says img2img with that strength, and
the call's inputs beside the step images draw the dropped image pixel for pixel."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from ghostviewer.record import RunRecord
from tests.gui.batch_runs import input_images
from tests.gui.live_window import needs_demo
from tests.gui.test_prompt_inputs import drop

pytestmark = needs_demo
POINTS = [(0.08, 0.08), (0.35, 0.35), (0.5, 0.87), (0.9, 0.5)]  # the yellow, the green square, the red bar


def test_an_img2img_run_from_the_window_is_recorded_and_shown(window, qtbot, demo_loaded, gui_env: Path,  # noqa: ANN001
                                                              tmp_path: Path) -> None:
    from ghostviewer.engine.server import Emitter, EngineSession

    init = input_images(tmp_path)["init"]
    state, panel = window.state, window.prompt_panel
    state.prompt.update(prompt="a red circle on a blue background", seed=3, seed_locked=True, steps=4)
    assert drop(panel, init)
    panel.inputs.strength_slider.setValue(75)
    job = state.controller.queue_run()
    assert job is not None and job.settings["init_image"] == str(init) and job.settings["strength"] == 0.75
    out = io.StringIO()
    session = EngineSession(Emitter(out))
    session.loaded = demo_loaded
    session.handle({"cmd": "run", "id": 1, "settings": job.settings, "runs_dir": str(gui_env)})
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    (finished,) = [e for e in events if e["event"] == "finished"]
    record = RunRecord(finished["run_dir"])
    assert record.settings["kind"] == "img2img" and record.settings["strength"] == 0.75
    assert record.settings["init_image"] == str(init.resolve())
    window.resize(1366, 768)
    window.show()
    state.opener.open_run(finished["run_dir"])
    inputs = window.call_inputs
    qtbot.waitUntil(lambda: not inputs.loading and inputs._for is not None
                    and inputs._for[0] == finished["run_dir"], timeout=10000)
    assert inputs.isVisible() and inputs.kind.text() == "img2img" and inputs.values.text().startswith("strength 0.75")
    (tile,) = inputs.tiles[:len(inputs.inputs.images)]
    pixels = np.asarray(Image.open(init).convert("RGB"))
    for x, y in POINTS:
        expected = tuple(int(v) for v in pixels[int(y * 64), int(x * 64)])
        assert tile.thumb.shown_pixel(x, y) == expected, (x, y)

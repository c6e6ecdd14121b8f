"""A REAL ControlNet run of a batch of two made from the window: the control image set through its slot, the
ControlNet folder typed in its field, the scale and the batch size in their boxes; Run queues that spec and the
engine's `run` command (an in-process EngineSession on the shared demo pipeline) makes it — kind controlnet, the
scale and the batch recorded, the control image kept in the record, a verdict per image."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PySide6.QtTest import QTest

from ghostviewer.record import RunRecord
from tests.gui.live_window import needs_demo

pytestmark = needs_demo


def test_a_controlnet_batch_from_the_window_is_made_and_recorded(window, demo_loaded, gui_env: Path,  # noqa: ANN001
                                                                 tmp_path: Path) -> None:
    from ghostviewer.engine.server import Emitter, EngineSession
    from tests.engine.tiny_controlnet import build_controlnet, control_image, save_controlnet

    folder = save_controlnet(build_controlnet(demo_loaded.pipe), tmp_path / "controlnet")
    control = tmp_path / "scribble.png"
    control_image(64).save(control)
    state, inputs = window.state, window.prompt_panel.inputs
    state.prompt.update(prompt="a red circle on a blue background", seed=4, seed_locked=True, steps=3)
    inputs.set_file("control_image", str(control))
    inputs.header.setChecked(True)
    QTest.keyClicks(inputs.controlnet, str(folder))  # typed, as a user does: textEdited sets the model
    inputs.control_scale.setValue(0.5)
    inputs.batch.setValue(2)
    job = state.controller.queue_run()
    assert job is not None, window.prompt_panel.run_button.toolTip()
    assert (job.settings["control_image"], job.settings["controlnet"]) == (str(control), str(folder))
    assert (job.settings["controlnet_scale"], job.settings["batch"]) == (0.5, 2)
    out = io.StringIO()
    session = EngineSession(Emitter(out))
    session.loaded = demo_loaded
    session.handle({"cmd": "run", "id": 1, "settings": job.settings, "runs_dir": str(gui_env)})
    (finished,) = [e for e in map(json.loads, out.getvalue().splitlines()) if e["event"] == "finished"]
    record = RunRecord(finished["run_dir"])
    assert record.settings["kind"] == "controlnet"
    assert (record.settings["controlnet_scale"], record.settings["batch"]) == (0.5, 2)
    assert record.image_path("input_control_image") is not None
    assert len(record.verdicts) == 2 and all(v["label"] == "ok" for v in record.verdicts)

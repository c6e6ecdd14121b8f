"""The prompt panel makes every kind of call (real widgets, real image files, no engine): an image dropped on the panel
makes the run img2img with that file and the strength shown, a second one its mask (inpaint); a strength or a mask
the run spec or the engine would refuse turns Run off with their own words and nothing is queued; ControlNet, batch,
generator device and LoRA rows go into the spec; the inputs are remembered across windows, a file gone by then is
left out with a note; a painted mask is saved beside the settings, at the init image's size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage
from PySide6.QtWidgets import QApplication, QWidget

from ghostviewer.gui.app_settings import AppSettings, inputs_dir
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.pipeline_model import PipelineModel
from ghostviewer.gui.models.prompt_model import PromptModel
from ghostviewer.gui.widgets.mask_painter import MaskCanvas
from ghostviewer.gui.widgets.prompt_panel import PromptPanel
from ghostviewer.spec import RunSpec, validate
from ghostviewer.spec.errors import SpecError


def _image(path: Path, size: tuple[int, int] = (64, 64), colour: tuple[int, int, int] = (230, 220, 40)) -> Path:
    Image.new("RGB", size, colour).save(path)
    return path


def drop(widget: QWidget, *paths: Path) -> bool:
    """Drag these files over the widget and drop them, as Qt delivers it; whether the widget took the drag."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    centre = widget.rect().center()
    enter = QDragEnterEvent(centre, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    enter.ignore()  # as Qt hands it over: a widget that wants it accepts it
    QApplication.sendEvent(widget, enter)
    if not enter.isAccepted():
        return False
    QApplication.sendEvent(widget, QDropEvent(QPointF(QPoint(centre)), Qt.DropAction.CopyAction, mime,
                                              Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier))
    return True


@pytest.fixture
def panel(qtbot) -> PromptPanel:  # noqa: ANN001
    widget = PromptPanel(PromptModel(), PipelineModel(), BlockModel())
    qtbot.addWidget(widget)
    return widget


def _spec(panel: PromptPanel) -> RunSpec:
    assert panel.refusal() == "", panel.refusal()
    return RunSpec.from_dict(panel.model.take_settings(*panel.pipeline.key()))


def test_a_dropped_image_makes_img2img_and_a_second_one_its_mask(panel: PromptPanel, tmp_path: Path) -> None:
    init, mask = _image(tmp_path / "init.png"), _image(tmp_path / "mask.png", colour=(255, 255, 255))
    assert not panel.inputs.body.isVisibleTo(panel) and panel.inputs.header.text() == "Inputs"  # closed
    assert RunSpec.from_dict(panel.model.take_settings("demo", "auto", "")).to_dict() == RunSpec(
        prompt=panel.model.prompt, steps=panel.model.steps).to_dict()  # a plain run's spec is as it was
    assert not drop(panel, tmp_path)  # a folder is the window's to open (a pipeline, a run)
    assert drop(panel, init)
    panel.inputs.strength_slider.setValue(65)
    spec = _spec(panel)
    assert spec.kind == "img2img" and spec.init_image == str(init) and spec.strength == 0.65 and spec.mask is None
    assert panel.inputs.header.isChecked() and panel.inputs.header.text() == "img2img"
    assert panel.inputs.summary.text() == "Inputs: img2img · strength 0.65"
    slot = panel.inputs.slots["init_image"]
    assert slot.thumb.shown_pixel(0.5, 0.5) == (230, 220, 40) and slot.remove.isVisibleTo(panel)
    assert drop(panel, mask)
    spec = _spec(panel)
    assert spec.kind == "inpaint" and spec.mask == str(mask) and spec.init_image == str(init)
    panel.inputs.slots["mask"].remove.click()  # "×": the mask goes, the run is img2img again
    assert _spec(panel).kind == "img2img" and not panel.inputs.slots["mask"].remove.isVisibleTo(panel)


def test_a_refused_strength_or_mask_says_the_specs_words_and_queues_nothing(window, tmp_path: Path) -> None:  # noqa: ANN001
    state, panel = window.state, window.prompt_panel
    init = _image(tmp_path / "init.png")
    assert drop(panel, init)
    panel.inputs.strength_slider.setValue(0)
    expected = "strength must be more than 0 and at most 1, not 0.0"
    with pytest.raises(SpecError, match=expected):
        validate(RunSpec(prompt="x", init_image=str(init), strength=0.0))  # the spec's own words
    assert panel.refusal() == expected and panel.why.text() == f"Run is off: {expected}"
    assert not panel.run_button.isEnabled() and "#c62828" in panel.inputs.strength.styleSheet()
    assert state.controller.queue_run() is None and state.queue.jobs() == []
    state.prompt.update(strength=0.1, steps=4)  # int(4 × 0.1) = 0 denoising steps
    assert panel.refusal().startswith("strength 0.1 with 4 steps runs int(4 × 0.1) = 0 denoising steps")
    state.prompt.update(strength=0.5)
    assert panel.refusal() == ""
    small = _image(tmp_path / "small-mask.png", (32, 32), (255, 255, 255))
    assert drop(panel, small)
    assert panel.refusal() == (f"the mask {small} is 32×32 but the init image is 64×64: they must be the same size")
    assert "#c62828" in panel.inputs.slots["mask"].thumb.styleSheet()
    assert state.controller.queue_run() is None and state.queue.jobs() == []
    assert window.statusBar().currentMessage().startswith("Not queued: the mask")


def test_controlnet_batch_generator_and_loras_go_into_the_spec(panel: PromptPanel, qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    control, folder = _image(tmp_path / "edges.png", colour=(0, 0, 0)), tmp_path / "controlnet"
    folder.mkdir()
    editor = panel.inputs
    editor.set_file("control_image", str(control))
    qtbot.keyClicks(editor.controlnet, str(folder))
    editor.control_scale.setValue(0.5)
    editor.batch.setValue(4)
    editor.generator.setCurrentIndex(editor.generator.findData("cuda"))
    spec = _spec(panel)
    assert (spec.kind, spec.control_image, spec.controlnet, spec.controlnet_scale) == (
        "controlnet", str(control), str(folder), 0.5)
    assert spec.batch == 4 and spec.generator_device == "cuda"
    assert editor.summary.text() == "Inputs: controlnet · control 0.5 · batch 4 · cuda generator"
    lora = tmp_path / "style.safetensors"
    lora.write_bytes(b"not read here")
    editor.loras.add_files([str(lora), str(lora)])  # once
    editor.loras.rows[0].scale.setValue(0.7)
    editor.loras.fuse.setChecked(True)
    settings = panel.model.take_settings("demo", "auto", "")
    assert settings["adapters"] == [f"{lora}:0.7"] and panel.model.fuse_lora
    try:  # until the engine makes LoRA calls the spec refuses them in one line: the panel shows exactly that line
        validate(RunSpec.from_dict(settings))
        said = ""
    except SpecError as exc:
        said = str(exc)
    assert panel.refusal() == said
    assert panel.why.isVisibleTo(panel) == bool(said)
    editor.loras.rows[0].remove.click()
    assert panel.model.loras == () and "adapters" not in panel.model.take_settings("demo", "auto", "")


def test_the_inputs_are_remembered_and_a_gone_file_is_left_out_with_a_note(qtbot, gui_env: Path,  # noqa: ANN001
                                                                          tmp_path: Path) -> None:
    from ghostviewer.gui.app import create_window

    def open_window():  # noqa: ANN202
        win = create_window(AppSettings(), dialogs=False)
        qtbot.addWidget(win)
        return win

    init, mask = _image(tmp_path / "init.png"), _image(tmp_path / "mask.png", colour=(255, 255, 255))
    first = open_window()
    first.state.prompt.update(init_image=str(init), mask=str(mask), strength=0.4, batch=2, fault="nan-latents")
    first.state.save()
    first.state.controller.shutdown()
    again = open_window()
    model, editor = again.state.prompt, again.prompt_panel.inputs
    assert (model.init_image, model.mask, model.strength, model.batch) == (str(init), str(mask), 0.4, 2)
    assert model.fault == "" and model.notes == []  # a ghost is never remembered
    assert editor.header.text() == "inpaint" and not editor.header.isChecked()  # closed until used, named
    assert editor.slots["mask"].thumb.shown_pixel(0.5, 0.5) == (255, 255, 255)
    again.state.controller.shutdown()
    mask.unlink()
    last = open_window()
    model, editor = last.state.prompt, last.prompt_panel.inputs
    assert model.init_image == str(init) and model.mask == "" and model.kind == "img2img"
    assert model.notes == [f"the mask {mask} is no longer there: left out"]
    assert editor.note.isVisibleTo(last) and str(mask) in editor.note.text()
    assert last.prompt_panel.refusal() == ""  # a note, not an error
    last.state.controller.shutdown()


def test_a_painted_mask_is_saved_beside_the_settings_at_the_images_size(qtbot, gui_env: Path,  # noqa: ANN001
                                                                       tmp_path: Path) -> None:
    canvas = MaskCanvas(QImage(str(_image(tmp_path / "init.png", (48, 32)))))
    qtbot.addWidget(canvas)
    canvas.brush_px = 4
    scale = canvas.scale  # screen pixels per image pixel

    def stroke(start: tuple[int, int], end: tuple[int, int]) -> None:
        left = Qt.MouseButton.LeftButton
        qtbot.mousePress(canvas, left, pos=QPoint(round(start[0] * scale), round(start[1] * scale)))
        qtbot.mouseRelease(canvas, left, pos=QPoint(round(end[0] * scale), round(end[1] * scale)))

    stroke((30, 16), (46, 16))  # a line over the right part (in the image's pixels)
    stroke((2, 2), (4, 2))
    canvas.undo()  # the last stroke only
    path = Path(canvas.save(inputs_dir()))
    assert path.parent == tmp_path / "inputs" and path.suffix == ".png"  # GHOSTVIEWER_SETTINGS is in tmp_path
    mask = np.asarray(Image.open(path).convert("L"))
    assert mask.shape == (32, 48) and mask[16, 38] == 255 and mask[2, 3] == 0 and mask[16, 10] == 0
    canvas.clear()
    assert not np.asarray(Image.open(canvas.save(inputs_dir())).convert("L")).any()


@pytest.mark.parametrize("size", [(1280, 720), (1366, 768)])
def test_the_closed_inputs_cost_the_panel_no_row_and_open_ones_make_room(window, qtbot,  # noqa: ANN001
                                                                       size: tuple[int, int]) -> None:
    from tests.gui.test_window_fits import fully_shown

    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    QApplication.processEvents()
    panel = window.prompt_panel
    bar = panel.scroll.verticalScrollBar()
    assert not bar.isVisible() and not panel.inputs.isVisibleTo(panel)  # closed: no scroll bar, no row
    assert fully_shown(window, panel.inputs.header) and fully_shown(window, panel.fault)
    dock = next(d for d in window.docks if d.windowTitle() == "Prompt")
    closed = dock.height()
    panel.inputs.header.click()
    QApplication.processEvents()
    assert panel.inputs.body.isVisible() and dock.height() > closed  # the dock grows toward the fields
    assert window.size().toTuple() == size and fully_shown(window, panel.run_button)
    panel.inputs.header.click()
    QApplication.processEvents()
    assert dock.height() == closed
    qtbot.waitUntil(lambda: not bar.isVisible(), timeout=2000)  # the scroll area lays out on its next pass

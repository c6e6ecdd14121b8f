"""The call's inputs in the prompt panel, in a section closed until used: its toggle (`header`, which the panel puts
at the end of the Ghost row, so a closed section costs no height) names the kind the next run makes, and the open
section starts with what it makes ("Inputs: img2img · strength 0.80 · batch 2"): the init image (img2img) with its
strength, the mask (inpaint; picked, dropped or painted over the init image), the control image and its ControlNet
folder and scale, the batch size and generator device, and the LoRA list. Bound to PromptModel both ways; the run
spec refuses what it refuses, and the panel shows its words under Run."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.models.prompt_model import PromptModel
from ghostviewer.gui.widgets.input_slot import InputSlot
from ghostviewer.gui.widgets.lora_list import LoraList
from ghostviewer.spec.run_spec import GENERATOR_DEVICES

SLIDER_STEPS = 100  # the strength slider's ticks over 0–1
NOTE_STYLE = "color: #e0a000; font-size: 8pt"
IN_USE_STYLE = "QToolButton { color: #ef6c00; font-weight: bold; }"
BAD_STYLE = "border: 2px solid #c62828; background: #ffebee;"
MAX_BATCH = 64  # the spec's range (1–64)
SLOTS = {"init_image": ("init image", "Init image…"), "mask": ("mask", "Mask…"),
         "control_image": ("control image", "Control…")}


def summary(model: PromptModel) -> str:
    """The header's words: the kind and what differs from a plain run of one image."""
    words = [model.kind]
    if model.init_image:
        words.append(f"strength {model.strength:.2f}")
    if model.control_image:
        words.append(f"control {model.controlnet_scale:g}")
    if model.batch != 1:
        words.append(f"batch {model.batch}")
    if model.generator_device != "cpu":
        words.append(f"{model.generator_device} generator")
    if model.loras:
        words.append(f"{len(model.loras)} LoRA" + ("s" if len(model.loras) > 1 else ""))
    return "Inputs: " + " · ".join(words)


def in_use(model: PromptModel) -> bool:
    return summary(model) != "Inputs: text2img"


class CallInputsEditor(QWidget):
    def __init__(self, model: PromptModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.header = QToolButton(checkable=True, autoRaise=True,
                                  toolButtonStyle=Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.summary = QLabel(styleSheet="font-weight: bold", wordWrap=True)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        self.note = QLabel(wordWrap=True, styleSheet=NOTE_STYLE)
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        self.slots = {key: InputSlot(words, text) for key, (words, text) in SLOTS.items()}
        self.strength_slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=SLIDER_STEPS,
                                       toolTip="How much of the init image is repainted (0–1)")
        self.strength = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.05, decimals=2,
                                       toolTip=self.strength_slider.toolTip())
        self.paint = QAction("Paint over the init image…", self, toolTip="Paint the mask (white: repaint)")
        self.controlnet = QLineEdit(placeholderText="the pipeline's own",
                                    toolTip="A saved ControlNetModel's folder (as the CLI's --controlnet)")
        self.controlnet_pick = QToolButton(text="…", toolTip="Choose a ControlNet folder")
        self.control_scale = QDoubleSpinBox(minimum=0.0, maximum=100.0, singleStep=0.1, decimals=2,
                                            toolTip="controlnet_conditioning_scale (0: the control has no effect)")
        self.batch = QSpinBox(minimum=1, maximum=MAX_BATCH, toolTip="Images per prompt (num_images_per_prompt)")
        self.generator = QComboBox(toolTip="Where the seed's noise is drawn (CPU and CUDA draw different noise)")
        for device in GENERATOR_DEVICES:
            self.generator.addItem(device, device)
        self.loras = LoraList(model)
        mask_pick = self.slots["mask"].pick  # its menu: a file, or paint one
        mask_pick.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        menu = QMenu(mask_pick)
        menu.addAction("Choose a file…", self.slots["mask"].choose)
        menu.addAction(self.paint)
        mask_pick.setMenu(menu)
        self.body = QWidget()
        self._layout()
        self.header.toggled.connect(self._open)
        for key, slot in self.slots.items():
            slot.fileChosen.connect(lambda path, key=key: self.set_file(key, path))
            slot.removeRequested.connect(lambda key=key: model.update(**{key: ""}))
        self.strength_slider.valueChanged.connect(lambda v: model.update(strength=v / SLIDER_STEPS))
        self.strength.valueChanged.connect(lambda v: model.update(strength=round(float(v), 4)))
        self.paint.triggered.connect(self.paint_mask)
        self.controlnet.textEdited.connect(lambda text: model.update(controlnet=text.strip()))  # as typed: Run
        # never takes a folder the field no longer shows
        self.controlnet_pick.clicked.connect(self._choose_controlnet)
        self.control_scale.valueChanged.connect(lambda v: model.update(controlnet_scale=float(v)))
        self.batch.valueChanged.connect(lambda v: model.update(batch=int(v)))
        self.generator.currentIndexChanged.connect(
            lambda i: model.update(generator_device=self.generator.itemData(i)) if i >= 0 else None)
        model.changed.connect(self._sync)
        self.header.setChecked(bool(model.notes))  # closed at launch, even when in use: its toggle says so
        self._open(self.header.isChecked())
        self._sync()

    def _layout(self) -> None:
        slots = QHBoxLayout()
        slots.setContentsMargins(0, 0, 0, 0)
        for slot in self.slots.values():
            slots.addWidget(slot)
        slots.addStretch(1)
        strength = QHBoxLayout()
        strength.addWidget(self.strength_slider, 1)
        strength.addWidget(self.strength)
        controlnet = QHBoxLayout()
        controlnet.addWidget(self.controlnet, 1)
        controlnet.addWidget(self.controlnet_pick)
        controlnet.addWidget(QLabel("×"))  # the conditioning scale
        controlnet.addWidget(self.control_scale)
        batch = QHBoxLayout()
        batch.addWidget(self.batch)
        batch.addWidget(QLabel("generator"))
        batch.addWidget(self.generator)
        batch.addStretch(1)
        form = QFormLayout()
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow(slots)
        form.addRow("Strength", strength)
        form.addRow("ControlNet", controlnet)
        form.addRow("Batch", batch)
        form.addRow("LoRA", self.loras)
        self.body.setLayout(form)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(self.summary)
        column.addWidget(self.note)
        column.addWidget(self.body)

    def _open(self, on: bool) -> None:
        self.header.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.body.setVisible(on)
        self.summary.setVisible(on)
        self.setVisible(on or bool(self.model.notes))  # closed: not even a layout spacing

    def set_file(self, key: str, path: str) -> None:
        self.model.update(**{key: path})
        self.header.setChecked(True)

    def drop_images(self, paths: list[str]) -> None:
        """Images dropped on the panel: the first free of init image then mask (a third replaces the mask)."""
        for path in paths:
            key = "init_image" if not self.model.init_image else "mask"
            self.set_file(key, path)

    def paint_mask(self) -> None:
        from ghostviewer.gui.widgets.mask_painter import paint_mask

        path = paint_mask(self, self.model.init_image, self.model.mask)
        if path:
            self.set_file("mask", path)

    def _choose_controlnet(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A ControlNet folder", self.model.controlnet)
        if folder:
            self.model.update(controlnet=folder)

    def _sync(self) -> None:
        m = self.model
        errors = m.field_errors()
        for key, slot in self.slots.items():
            slot.show_file(getattr(m, key), errors.get(key, ""))
        for box, value in ((self.strength, m.strength), (self.control_scale, m.controlnet_scale),
                           (self.batch, m.batch)):
            if box.value() != value:
                box.blockSignals(True)
                box.setValue(value)
                box.blockSignals(False)
        self.strength_slider.blockSignals(True)
        self.strength_slider.setValue(round(m.strength * SLIDER_STEPS))
        self.strength_slider.blockSignals(False)
        self.strength.setStyleSheet(BAD_STYLE if errors.get("strength") else "")
        self.strength.setToolTip(errors.get("strength") or self.strength_slider.toolTip())
        for widget in (self.strength_slider, self.strength, self.paint):
            widget.setEnabled(bool(m.init_image))
        self.control_scale.setEnabled(bool(m.control_image))
        if self.controlnet.text() != m.controlnet and not self.controlnet.hasFocus():
            self.controlnet.setText(m.controlnet)
        self.generator.blockSignals(True)
        self.generator.setCurrentIndex(max(0, self.generator.findData(m.generator_device)))
        self.generator.blockSignals(False)
        words, used = summary(m), in_use(m)
        self.summary.setText(words)
        self.header.setText(m.kind if m.kind != "text2img" else "Inputs")
        self.header.setStyleSheet(IN_USE_STYLE if used else "")
        self.header.setToolTip(words if used else "The call's inputs: img2img, inpaint, ControlNet, batch size, "
                                                  "generator device, LoRA")
        self.note.setText("\n".join(m.notes))
        self.note.setVisible(bool(m.notes))
        if m.notes and not self.header.isChecked():
            self.header.setChecked(True)

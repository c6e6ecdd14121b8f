"""Prompt panel: prompt, negative, seed (lock, randomise), steps, guidance, size, scheduler; bound to
PromptModel both ways. The Run button only asks; the controller queues."""

from __future__ import annotations

from PySide6.QtCore import QRegularExpression, Qt, Signal
from PySide6.QtGui import QRegularExpressionValidator
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.models.pipeline_model import PipelineModel
from ghostviewer.gui.models.prompt_model import PromptModel


def _size_box() -> QSpinBox:
    box = QSpinBox(minimum=0, maximum=4096, singleStep=8)
    box.setSpecialValueText("native")
    return box


class PromptPanel(QWidget):
    runRequested = Signal()

    def __init__(self, model: PromptModel, pipeline: PipelineModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model, self.pipeline = model, pipeline
        self.prompt = QPlainTextEdit(placeholderText="a red circle on a blue background")
        self.prompt.setFixedHeight(64)
        self.negative = QLineEdit(placeholderText="negative prompt (optional)")
        self.seed = QLineEdit(validator=QRegularExpressionValidator(QRegularExpression(r"\d{1,19}")))
        self.lock = QToolButton(text="Lock", checkable=True,
                                toolTip="Locked: every run uses this seed. Unlocked: each run draws a new one.")
        self.dice = QToolButton(text="Randomise", toolTip="Draw a new seed now")
        self.steps = QSpinBox(minimum=1, maximum=1000)
        self.guidance = QDoubleSpinBox(minimum=0.0, maximum=50.0, singleStep=0.5, decimals=1)
        self.width_box, self.height_box = _size_box(), _size_box()
        self.scheduler = QComboBox()
        self.fault = QComboBox(toolTip="Inject a known bug from the ghost lab (fault presets)")
        self.run_button = QPushButton("Run  (Ctrl+Enter)")
        seed_row = QHBoxLayout()
        for widget in (self.seed, self.lock, self.dice):
            seed_row.addWidget(widget)
        size_row = QHBoxLayout()
        size_row.addWidget(self.width_box)
        size_row.addWidget(self.height_box)
        form = QFormLayout()
        form.addRow("Negative", self.negative)
        form.addRow("Seed", seed_row)
        form.addRow("Steps", self.steps)
        form.addRow("Guidance", self.guidance)
        form.addRow("Size (w×h)", size_row)
        form.addRow("Scheduler", self.scheduler)
        form.addRow("Ghost", self.fault)
        layout = QVBoxLayout(self)
        layout.addWidget(self.prompt)
        layout.addLayout(form)
        layout.addWidget(self.run_button)
        layout.addStretch(1)
        self.prompt.textChanged.connect(lambda: model.update(prompt=self.prompt.toPlainText()))
        self.negative.textEdited.connect(lambda text: model.update(negative=text))
        self.seed.textEdited.connect(lambda text: model.update(seed=int(text)) if text else None)
        self.lock.toggled.connect(lambda on: model.update(seed_locked=on))
        self.dice.clicked.connect(model.randomise_seed)
        self.steps.valueChanged.connect(lambda v: model.update(steps=v))
        self.guidance.valueChanged.connect(lambda v: model.update(guidance=float(v)))
        self.width_box.valueChanged.connect(lambda v: model.update(width=v))
        self.height_box.valueChanged.connect(lambda v: model.update(height=v))
        self.scheduler.currentIndexChanged.connect(self._on_scheduler)
        self.fault.currentIndexChanged.connect(
            lambda i: model.update(fault=self.fault.itemData(i) or "") if i >= 0 else None)
        self.run_button.clicked.connect(self.runRequested)
        model.changed.connect(self._sync)
        pipeline.changed.connect(self._sync_schedulers)
        pipeline.changed.connect(self._sync_faults)
        self._sync()
        self._sync_schedulers()

    def _on_scheduler(self, index: int) -> None:
        if index >= 0:
            self.model.update(scheduler=self.scheduler.itemData(index) or "")

    def _sync_faults(self) -> None:
        names = ["", *[str(f.get("name")) for f in self.pipeline.faults]]
        if self.model.fault and self.model.fault not in names:
            names.append(self.model.fault)
        if [self.fault.itemData(i) for i in range(self.fault.count())] != names:
            self.fault.blockSignals(True)
            self.fault.clear()
            descriptions = {str(f.get("name")): str(f.get("description", "")) for f in self.pipeline.faults}
            for name in names:
                self.fault.addItem(name or "none", name)
                self.fault.setItemData(self.fault.count() - 1, descriptions.get(name, ""),
                                       Qt.ItemDataRole.ToolTipRole)
            self.fault.blockSignals(False)
        self.fault.blockSignals(True)
        self.fault.setCurrentIndex(max(0, self.fault.findData(self.model.fault)))
        self.fault.blockSignals(False)

    def _sync_schedulers(self) -> None:
        names = ["", *self.pipeline.schedulers]
        if self.model.scheduler and self.model.scheduler not in names:
            names.append(self.model.scheduler)
        if [self.scheduler.itemData(i) for i in range(self.scheduler.count())] == names:
            return
        self.scheduler.blockSignals(True)
        self.scheduler.clear()
        for name in names:
            self.scheduler.addItem(name or "pipeline default", name)
        self.scheduler.setCurrentIndex(max(0, self.scheduler.findData(self.model.scheduler)))
        self.scheduler.blockSignals(False)

    def _sync(self) -> None:
        m = self.model
        if self.prompt.toPlainText() != m.prompt:
            self.prompt.setPlainText(m.prompt)
        if self.negative.text() != m.negative:
            self.negative.setText(m.negative)
        if self.seed.text() != str(m.seed):
            self.seed.setText(str(m.seed))
        self.lock.blockSignals(True)
        self.lock.setChecked(m.seed_locked)
        self.lock.blockSignals(False)
        for box, value in ((self.steps, m.steps), (self.guidance, m.guidance), (self.width_box, m.width),
                           (self.height_box, m.height)):
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        self.lock.setText("Locked" if m.seed_locked else "Lock")
        self._sync_schedulers()
        self._sync_faults()
        self.scheduler.blockSignals(True)
        self.scheduler.setCurrentIndex(max(0, self.scheduler.findData(m.scheduler)))
        self.scheduler.blockSignals(False)

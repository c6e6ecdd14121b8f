"""Prompt panel: prompt, negative, seed (lock, randomise), steps, guidance, size, scheduler, ghost, and the call's
inputs in a section closed until used (an image file dropped on the panel makes the run img2img, a second one its
mask: inpaint; widgets/call_inputs_editor.py); bound to PromptModel both ways. The fields scroll when the dock is
short; the Run button stays below them, always in view, and says what the next run will change in the pipeline
(ghost, bypasses, captures). The Run button only asks; the controller queues."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QResizeEvent, QValidator
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QComboBox,
    QDockWidget,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui import messages
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.pipeline_model import PipelineModel
from ghostviewer.gui.models.prompt_model import FAMILY_GUIDANCE, PromptModel, intervention_words
from ghostviewer.gui.widgets.call_inputs_editor import CallInputsEditor
from ghostviewer.gui.widgets.input_slot import dropped_images
from ghostviewer.spec.seeds import MAX_SEED

RUN_TEXT = "Run  (Ctrl+Enter)"
ACTIVE_STYLE = "QPushButton { color: #ef6c00; font-weight: bold; }"
BAD_FIELD_STYLE = "border: 2px solid #c62828; background: #ffebee;"
REFUSAL_STYLE = "color: #c62828;"
# The boxes take far more than a run accepts: a typed value stays as typed and the run spec's own checks refuse it
# in words (a box's own maximum would cut "100000" to "1000" without a word).
BOX_LIMIT = 999_999
FIT_SLACK_PX = 16  # resizeDocks lands a few pixels short of the height asked for
# field -> (name in a message, what it should hold)
FIELD_WORDS = {"seed": ("seed", "a whole number (or press Randomise)"), "steps": ("steps", "a number of steps"),
               "guidance": ("guidance", "a number (or the lowest value: pipeline default)"),
               "width": ("width", "a width in pixels (0: native)"),
               "height": ("height", "a height in pixels (0: native)")}


def _size_box() -> QSpinBox:
    box = QSpinBox(minimum=0, maximum=BOX_LIMIT, singleStep=8)
    box.setSpecialValueText("native")
    return box


def unread_message(key: str, text: str) -> str:
    name, what = FIELD_WORDS[key]
    return (messages.FIELD_UNREAD.format(name=name, text=text, what=what) if text.strip()
            else messages.FIELD_EMPTY.format(name=name, what=what))


SEED_TIP = f"The run's seed: 0 to {MAX_SEED}. Unlock it to draw a new one per run."


class SeedValidator(QValidator):
    """Digits only, at most MAX_SEED (what the engine accepts): a keystroke past it is refused, not truncated later."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)

    def validate(self, text: str, pos: int) -> tuple[QValidator.State, str, int]:
        if not text:
            return QValidator.State.Intermediate, text, pos
        if not (text.isascii() and text.isdigit()) or int(text) > MAX_SEED:
            return QValidator.State.Invalid, text, pos
        return QValidator.State.Acceptable, text, pos


class PromptPanel(QWidget):
    runRequested = Signal()

    def __init__(self, model: PromptModel, pipeline: PipelineModel, blocks: BlockModel | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model, self.pipeline, self.blocks = model, pipeline, blocks
        self.prompt = QPlainTextEdit(placeholderText="a red circle on a blue background")
        self.prompt.setFixedHeight(56)
        self.negative = QLineEdit(placeholderText="negative prompt (optional)")
        self.seed = QLineEdit(validator=SeedValidator(), toolTip=SEED_TIP)
        self.seed.inputRejected.connect(self._seed_rejected)
        self.lock = QToolButton(text="Lock", checkable=True,
                                toolTip="Locked: every run uses this seed. Unlocked: each run draws a new one.")
        self.dice = QToolButton(text="Randomise", toolTip="Draw a new seed now")
        self.steps = QSpinBox(minimum=0, maximum=BOX_LIMIT)
        self.guidance = QDoubleSpinBox(minimum=FAMILY_GUIDANCE, maximum=BOX_LIMIT, singleStep=0.5, decimals=2,
                                       toolTip="Classifier-free guidance; lowest: the pipeline family's usual "
                                               "(7.5 for SD, 5 for SDXL, 3.5 for Flux)")
        self.guidance.setSpecialValueText("pipeline default")
        self.width_box, self.height_box = _size_box(), _size_box()
        self.scheduler = QComboBox()
        self.fault = QComboBox(toolTip="Inject a known bug from the ghost lab (fault presets)")
        self.run_text = RUN_TEXT  # what the Run button says in full (elided when the dock is narrow)
        self.run_button = QPushButton(RUN_TEXT)
        self.run_button.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)  # long texts elide
        self.why = QLabel(wordWrap=True, styleSheet=REFUSAL_STYLE)  # why Run is off, in the spec's own words
        self.why.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        self.why.hide()
        self.boxes: dict[str, QAbstractSpinBox] = {"steps": self.steps, "guidance": self.guidance,
                                                   "width": self.width_box, "height": self.height_box}
        self.fields: dict[str, QWidget] = {"prompt": self.prompt, "negative": self.negative, "seed": self.seed,
                                           **self.boxes}
        self.tips = {key: widget.toolTip() for key, widget in self.fields.items()}
        self.run_tip = "Queue a run with these settings (Ctrl+Enter)"
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
        self.inputs = CallInputsEditor(model)
        ghost_row = QHBoxLayout()
        ghost_row.addWidget(self.fault, 1)
        ghost_row.addWidget(self.inputs.header)  # the inputs' toggle: a closed section costs no row
        form.addRow("Ghost", ghost_row)
        fields = QWidget()
        column = QVBoxLayout(fields)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.prompt)
        column.addLayout(form)
        column.addWidget(self.inputs)
        column.addStretch(1)
        self.setAcceptDrops(True)
        self.scroll = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)  # a narrow dock scrolls
        self.scroll.setWidget(fields)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.scroll, 1)
        layout.addWidget(self.run_button)
        layout.addWidget(self.why)
        self.prompt.textChanged.connect(lambda: model.update(prompt=self.prompt.toPlainText()))
        self.negative.textEdited.connect(lambda text: model.update(negative=text))
        self.seed.textEdited.connect(self._on_seed_text)
        self.lock.toggled.connect(lambda on: model.update(seed_locked=on))
        self.dice.clicked.connect(model.randomise_seed)
        self.steps.valueChanged.connect(lambda v: model.update(steps=v))
        self.guidance.valueChanged.connect(lambda v: model.update(guidance=float(v)))
        self.width_box.valueChanged.connect(lambda v: model.update(width=v))
        self.height_box.valueChanged.connect(lambda v: model.update(height=v))
        for key, box in self.boxes.items():  # text that is no value yet ("", "-"): the run waits, never the old value
            box.lineEdit().textChanged.connect(lambda _text, key=key, box=box: self._on_box_text(key, box))
            box.editingFinished.connect(lambda key=key, box=box: self._on_box_text(key, box))  # its text put back
        self.scheduler.currentIndexChanged.connect(self._on_scheduler)
        self.fault.currentIndexChanged.connect(
            lambda i: model.update(fault=self.fault.itemData(i) or "") if i >= 0 else None)
        self.run_button.clicked.connect(self.runRequested)
        self.inputs.header.toggled.connect(self._fit_dock)
        self._closed_heights: dict[QDockWidget, int] = {}  # the left column's docks before the inputs opened
        model.changed.connect(self._sync)
        pipeline.changed.connect(self._sync_schedulers)
        pipeline.changed.connect(self._sync_faults)
        pipeline.changed.connect(self._sync_refusal)
        if blocks is not None:
            blocks.bypassChanged.connect(self._sync_run_button)
            blocks.captureChanged.connect(self._sync_run_button)
        self._sync()
        self._sync_schedulers()

    def _on_seed_text(self, text: str) -> None:
        if text:
            self.model.update(seed=int(text))
        else:
            self.model.set_unread("seed", unread_message("seed", text))

    def _on_box_text(self, key: str, box: QAbstractSpinBox) -> None:
        if box.hasAcceptableInput():
            self.model.set_unread(key, None)
        else:
            self.model.set_unread(key, unread_message(key, box.lineEdit().text()))

    def refusal(self) -> str:
        """Why Run is off ("" when it is on): exactly what `RunCoordinator.queue_run` would refuse."""
        return self.model.refusal(*self.pipeline.key())

    def _sync_refusal(self) -> None:
        """Run is off while a field would not run as shown; the field is outlined and the reason is under Run."""
        why, errors = self.refusal(), self.model.field_errors()
        for key, widget in self.fields.items():
            bad = errors.get(key, "")
            style = BAD_FIELD_STYLE if bad else ""
            if widget.styleSheet() != style:
                widget.setStyleSheet(style)
            widget.setToolTip(bad or self.tips[key])
        self.run_button.setEnabled(not why)
        self.run_button.setToolTip(f"Run is off: {why}" if why else self.run_tip)
        self.why.setVisible(bool(why))
        self.why.setText(f"Run is off: {why}" if why else "")
        self.why.setToolTip(why)

    def _seed_rejected(self) -> None:
        """Say why a keystroke or paste did nothing (a seed past the largest, or not a number)."""
        QToolTip.showText(self.seed.mapToGlobal(self.seed.rect().bottomLeft()), SEED_TIP, self.seed)

    def active_words(self) -> list[str]:
        """What the next run changes in the pipeline: ghost, bypasses, captures."""
        settings = {"faults": [self.model.fault] if self.model.fault else []}
        if self.blocks is not None:
            settings |= self.blocks.run_fields()
        return intervention_words(settings)

    def _sync_run_button(self) -> None:
        words = self.active_words()
        text = f"Run ({', '.join(words)})" if words else RUN_TEXT
        if self.run_text != text:
            self.run_text = text
            self.run_button.setStyleSheet(ACTIVE_STYLE if words else "")
            self.run_tip = (
                "The next run changes the pipeline: " + ", ".join(words) + " (Ctrl+Enter)" if words
                else "Queue a run with these settings (Ctrl+Enter)")
        self._elide_run_button()
        self._sync_refusal()

    def _elide_run_button(self) -> None:
        """The full text when it fits the button, else cut at the end with '…' (the tooltip has it all)."""
        room = self.run_button.width() - 16
        text = self.run_text if not self.isVisible() else self.run_button.fontMetrics().elidedText(
            self.run_text, Qt.TextElideMode.ElideRight, max(room, 40))
        if self.run_button.text() != text:
            self.run_button.setText(text)

    def _fit_dock(self, opened: bool) -> None:
        """The inputs opened: the Prompt dock grows toward the fields' height (as far as its column lets it, the
        rest scrolls); closed: the column's docks go back to their heights before."""
        dock = self.parentWidget()
        while dock is not None and not isinstance(dock, QDockWidget):
            dock = dock.parentWidget()
        window = dock.parentWidget() if dock is not None else None
        if dock is None or not isinstance(window, QMainWindow) or dock.isFloating() or not self.isVisible():
            return
        if opened:
            area = window.dockWidgetArea(dock)
            self._closed_heights = {d: d.height() for d in window.findChildren(QDockWidget)
                                    if window.dockWidgetArea(d) == area and d.isVisible() and not d.isFloating()}
            self.scroll.widget().layout().activate()  # the opened section's height, not the closed one's
            wanted = (dock.height() + self.scroll.widget().sizeHint().height() - self.scroll.viewport().height()
                      + FIT_SLACK_PX)
            window.resizeDocks([dock], [wanted], Qt.Orientation.Vertical)
            QTimer.singleShot(0, self, lambda: self.scroll.ensureWidgetVisible(self.inputs, 0, 0))  # once laid out
        elif self._closed_heights:
            docks = [d for d in self._closed_heights if d.isVisible() and not d.isFloating()]
            window.resizeDocks(docks, [self._closed_heights[d] for d in docks], Qt.Orientation.Vertical)
            self._closed_heights = {}

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt's name
        if dropped_images(event):
            event.acceptProposedAction()
        else:
            event.ignore()  # a pipeline folder, a run, a prompt list: the window opens it

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt's name
        images = dropped_images(event)
        if images:
            self.inputs.drop_images(images)
            event.acceptProposedAction()
        else:
            event.ignore()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._elide_run_button()

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
        if self.seed.text() != str(m.seed) and "seed" not in m.unread:  # an emptied field stays empty
            self.seed.setText(str(m.seed))
        self.lock.blockSignals(True)
        self.lock.setChecked(m.seed_locked)
        self.lock.blockSignals(False)
        for box, value in ((self.steps, m.steps), (self.guidance, m.guidance), (self.width_box, m.width),
                           (self.height_box, m.height)):
            if box.value() == value:
                continue  # setValue rewrites the text: typing "7." would become "7.0" under the cursor
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        self.lock.setText("Locked" if m.seed_locked else "Lock")
        self._sync_schedulers()
        self._sync_faults()
        self.scheduler.blockSignals(True)
        self.scheduler.setCurrentIndex(max(0, self.scheduler.findData(m.scheduler)))
        self.scheduler.blockSignals(False)
        self._sync_run_button()

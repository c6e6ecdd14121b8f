"""The next run's LoRA files, one row each: its name, its scale, a "×" to remove it; "Add LoRA…" picks more (a
.safetensors file dropped on the list adds it too) and "Fuse" asks for the weights fused. Bound to PromptModel.loras
and fuse_lora both ways; the run spec gets them as adapters "FILE:SCALE"."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.models.input_files import LORA_SUFFIXES
from ghostviewer.gui.models.prompt_model import PromptModel

MAX_SCALE = 100.0  # far past any use: the engine's checks say what a scale may be


def dropped_loras(event: QDragEnterEvent | QDropEvent) -> list[str]:
    urls = event.mimeData().urls() if event.mimeData().hasUrls() else []
    return [url.toLocalFile() for url in urls
            if url.isLocalFile() and Path(url.toLocalFile()).suffix.lower() in LORA_SUFFIXES]


class LoraRow(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.name = QLabel()
        self.name.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.scale = QDoubleSpinBox(minimum=-MAX_SCALE, maximum=MAX_SCALE, singleStep=0.1, decimals=2,
                                    toolTip="This LoRA's scale (1: as trained, 0: no effect)")
        self.remove = QToolButton(text="×", toolTip="Remove this LoRA", autoRaise=True)
        row.addWidget(self.name, 1)
        row.addWidget(self.scale)
        row.addWidget(self.remove)


class LoraList(QWidget):
    def __init__(self, model: PromptModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.setAcceptDrops(True)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        self.rows_box = QVBoxLayout()
        self.rows_box.setSpacing(2)
        self.rows: list[LoraRow] = []
        buttons = QHBoxLayout()
        self.add = QToolButton(text="Add LoRA…", toolTip="Add a LoRA file (.safetensors; or drop one here)")
        self.fuse = QCheckBox("Fuse", toolTip="Fuse the LoRA weights into the model for the run (never unless "
                                              "asked: a fused LoRA cannot be unloaded cleanly)")
        buttons.addWidget(self.add)
        buttons.addStretch(1)
        buttons.addWidget(self.fuse)
        column.addLayout(self.rows_box)
        column.addLayout(buttons)
        self.add.clicked.connect(self.choose)
        self.fuse.toggled.connect(lambda on: model.update(fuse_lora=on))
        model.changed.connect(self._sync)
        self._sync()

    def choose(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add LoRA files", "", "LoRA weights (*.safetensors)")
        self.add_files(paths)

    def add_files(self, paths: list[str]) -> None:
        known = {path for path, _scale in self.model.loras}
        new = [(path, 1.0) for path in dict.fromkeys(paths) if path not in known]
        if new:
            self.model.update(loras=(*self.model.loras, *new))

    def _set_scale(self, index: int, scale: float) -> None:
        rows = list(self.model.loras)
        if index < len(rows):
            rows[index] = (rows[index][0], float(scale))
            self.model.update(loras=rows)

    def _remove(self, index: int) -> None:
        self.model.update(loras=[row for i, row in enumerate(self.model.loras) if i != index])

    def _sync(self) -> None:
        loras = self.model.loras
        while len(self.rows) > len(loras):
            self.rows.pop().deleteLater()
        while len(self.rows) < len(loras):
            row, index = LoraRow(), len(self.rows)
            row.scale.valueChanged.connect(lambda value, index=index: self._set_scale(index, value))
            row.remove.clicked.connect(lambda _=False, index=index: self._remove(index))
            self.rows_box.addWidget(row)
            self.rows.append(row)
        for row, (path, scale) in zip(self.rows, loras, strict=True):
            row.name.setText(Path(path).name)
            row.name.setToolTip(path)
            if row.scale.value() != scale:
                row.scale.blockSignals(True)
                row.scale.setValue(scale)
                row.scale.blockSignals(False)
        self.fuse.blockSignals(True)
        self.fuse.setChecked(self.model.fuse_lora)
        self.fuse.blockSignals(False)
        self.fuse.setEnabled(bool(loras))

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt's name
        if dropped_loras(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt's name
        self.add_files(dropped_loras(event))
        event.acceptProposedAction()

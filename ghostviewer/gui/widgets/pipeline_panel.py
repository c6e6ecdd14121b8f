"""Pipeline panel: demo / folder / file, recent pipelines, device and dtype; bound to PipelineModel."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui import messages
from ghostviewer.gui.dialogs.error_reporter import first_line
from ghostviewer.gui.models.pipeline_model import DTYPES, PipelineModel
from ghostviewer.gui.widgets.elided_label import ElidedLabel

CHECKPOINT_FILTER = "Checkpoints (*.safetensors *.ckpt *.bin *.pt *.pth);;All files (*)"


class PipelinePanel(QWidget):
    def __init__(self, model: PipelineModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.dot = QLabel()
        self.status = ElidedLabel()  # one line: a long path or error cannot push Device and Dtype out of view
        status_row = QHBoxLayout()
        status_row.addWidget(self.dot)
        status_row.addWidget(self.status, 1)
        self.failure = ElidedLabel()  # the last failed load, in one line; its whole text behind Show details
        self.failure.setStyleSheet("color: #c62828;")
        self.details = QPushButton("Show details", toolTip="The whole message of the failed load")
        failure_row = QHBoxLayout()
        failure_row.addWidget(self.failure, 1)
        failure_row.addWidget(self.details)
        self.demo_button = QPushButton("Demo", toolTip="The embedded demo pipeline (64×64 shapes)")
        self.folder_button = QPushButton("Folder…", toolTip="A diffusers pipeline folder (model_index.json)")
        self.file_button = QPushButton("File…", toolTip="A single-file checkpoint (.safetensors)")
        self.recent = QComboBox(toolTip="Recent pipelines")
        self.device = QComboBox(toolTip="Where the engine runs the pipeline (auto: the best device found)")
        self.dtype = QComboBox()
        for dtype in DTYPES:
            self.dtype.addItem(dtype or "pipeline default", dtype)
        buttons = QHBoxLayout()
        for button in (self.demo_button, self.folder_button, self.file_button):
            buttons.addWidget(button)
        form = QFormLayout()
        form.addRow("Recent", self.recent)
        form.addRow("Device", self.device)
        form.addRow("Dtype", self.dtype)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)  # room for the failure line without scrolling at 1280×720
        layout.addLayout(status_row)
        layout.addLayout(failure_row)
        layout.addLayout(buttons)
        layout.addLayout(form)
        layout.addStretch(1)
        self.demo_button.clicked.connect(lambda: model.set_source("demo"))
        self.folder_button.clicked.connect(self.choose_folder)
        self.file_button.clicked.connect(self.choose_file)
        self.recent.activated.connect(self._on_recent)
        self.details.clicked.connect(self.show_details)
        self.device.currentTextChanged.connect(model.set_device)
        self.dtype.currentIndexChanged.connect(lambda i: model.set_dtype(self.dtype.itemData(i)))
        model.changed.connect(self._sync)
        self._sync()

    def choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a diffusers pipeline folder")
        if folder:
            self.model.set_source(folder)

    def choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a single-file checkpoint", "", CHECKPOINT_FILTER)
        if path:
            self.model.set_source(path)

    def show_details(self) -> QMessageBox:
        m = self.model
        box = QMessageBox(QMessageBox.Icon.Warning, "GhostViewer", self.failure.full_text,
                          QMessageBox.StandardButton.Ok, self)
        box.setDetailedText(m.failure)
        box.open()
        return box

    def _on_recent(self, index: int) -> None:
        source = self.recent.itemData(index)
        if source:
            self.model.set_source(str(source))

    def _sync(self) -> None:
        m = self.model
        colour = {"loaded": "#2e7d32", "failed": "#c62828"}.get(m.status, "#8a6d00")
        self.dot.setText(f"<span style='color:{colour}'>●</span>")
        self.status.set_full_text(m.describe(), tip=m.error or m.describe())
        name = "the demo pipeline" if m.failed_source == "demo" else m.failed_source
        line = messages.LOAD_FAILED_LINE.format(name=name, message=first_line(m.failure)) if m.failure else ""
        self.failure.set_full_text(line, tip=m.failure)
        self.failure.setVisible(bool(m.failure))
        self.details.setVisible(bool(m.failure))
        self.recent.blockSignals(True)
        self.recent.clear()
        for source in m.recent:
            self.recent.addItem("demo pipeline" if source == "demo" else source, source)
        self.recent.blockSignals(False)
        devices = m.devices if m.device in m.devices else [*m.devices, m.device]
        if [self.device.itemText(i) for i in range(self.device.count())] != devices:
            self.device.blockSignals(True)
            self.device.clear()
            self.device.addItems(devices)
            self.device.blockSignals(False)
        for combo, value in ((self.device, m.device), (self.dtype, m.dtype)):
            combo.blockSignals(True)
            index = combo.findData(value) if combo is self.dtype else combo.findText(value)
            combo.setCurrentIndex(max(index, 0))
            combo.blockSignals(False)

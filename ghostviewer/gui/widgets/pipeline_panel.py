"""Pipeline panel: demo / folder / file, recent pipelines, device and dtype; bound to PipelineModel."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.models.pipeline_model import DTYPES, PipelineModel

CHECKPOINT_FILTER = "Checkpoints (*.safetensors *.ckpt *.bin *.pt *.pth);;All files (*)"


class PipelinePanel(QWidget):
    def __init__(self, model: PipelineModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.status = QLabel(wordWrap=True)
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
        layout.addWidget(self.status)
        layout.addLayout(buttons)
        layout.addLayout(form)
        layout.addStretch(1)
        self.demo_button.clicked.connect(lambda: model.set_source("demo"))
        self.folder_button.clicked.connect(self.choose_folder)
        self.file_button.clicked.connect(self.choose_file)
        self.recent.activated.connect(self._on_recent)
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

    def _on_recent(self, index: int) -> None:
        source = self.recent.itemData(index)
        if source:
            self.model.set_source(str(source))

    def _sync(self) -> None:
        m = self.model
        colour = {"loaded": "#2e7d32", "failed": "#c62828"}.get(m.status, "#8a6d00")
        self.status.setText(f"<span style='color:{colour}'>●</span> {m.describe()}")
        self.status.setToolTip(m.error or m.source)
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

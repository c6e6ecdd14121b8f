"""File ▸ Export bug report…: the shown run as a bundle (.zip), its estimated size shown before saving.

Written here (record only, no torch) — unless "Include the first bad module's inputs" is ticked: that re-runs the
run, so the engine process writes the bundle, through the controller's ExportCoordinator
(coordinators/export_coordinator.py), which follows the command in the status bar and reports a failure."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui import messages
from ghostviewer.gui.app_state import AppState
from ghostviewer.gui.coordinators.export_coordinator import human_size
from ghostviewer.record import RecordError
from ghostviewer.record.bundle import estimate_bundle_size, export_bundle

INPUTS_BOX = "Include the first bad module's inputs (re-runs the run in the engine)"
INPUTS_TIP = ("Re-runs the run in the engine up to its first anomaly and adds that module's real inputs, weights "
              "and a standalone repro.py (runs/<run>/isolate/); when there are none, the bundle says why.")
INPUTS_ESTIMATE = " Plus the first bad module's inputs and weights (sized after the re-run)."


class BundleExportDialog(QDialog):
    """Where to save, what to leave out, and the estimated size; Save writes the bundle."""

    def __init__(self, state: AppState, run_dir: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state, self.run_dir = state, run_dir
        self.result_info: dict | None = None
        run_id = Path(run_dir).name
        self.setWindowTitle("Export bug report")
        self.tensors = QCheckBox("Include step tensors (latents, x0; previews are always kept)")
        self.feature_maps = QCheckBox("Include feature maps and attention maps")
        for box in (self.tensors, self.feature_maps):
            box.setChecked(True)
            box.toggled.connect(self.update_estimate)
        self.inputs = QCheckBox(INPUTS_BOX)
        self.inputs.setToolTip(INPUTS_TIP)
        self.inputs.toggled.connect(self.update_estimate)
        self.path = QLineEdit(str(Path.home() / f"ghostviewer-bug-{run_id}.zip"))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        self.estimate = QLabel()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(browse)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"Run <b>{run_id}</b>: settings, environment, weight hashes (never weights), "
                                "the record, images, a README.txt and a repro.py."))
        layout.addWidget(self.tensors)
        layout.addWidget(self.feature_maps)
        layout.addWidget(self.inputs)
        layout.addLayout(row)
        layout.addWidget(self.estimate)
        layout.addWidget(buttons)
        self.update_estimate()

    def options(self) -> dict[str, bool]:
        return {"include_tensors": self.tensors.isChecked(), "include_feature_maps": self.feature_maps.isChecked()}

    def update_estimate(self) -> int | None:
        try:
            size = estimate_bundle_size([self.run_dir], **self.options())
        except RecordError as exc:
            self.estimate.setText(messages.EXPORT_FAILED.format(message=exc))
            return None
        self.estimate.setText(messages.EXPORT_ESTIMATE.format(run_id=Path(self.run_dir).name, size=human_size(size))
                              + (INPUTS_ESTIMATE if self.inputs.isChecked() else ""))
        return size

    def _browse(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export bug report", self.path.text(), "Bug reports (*.zip)")
        if path:
            self.path.setText(path if path.lower().endswith(".zip") else path + ".zip")

    def save(self) -> bool:
        """Write the bundle; a failure is one line from the reporter, never a traceback. With the module's inputs
        the engine writes it: True once the command is sent (the status bar follows it)."""
        if self.inputs.isChecked():
            ident = self.state.controller.exports.export_with_inputs(self.run_dir, self.path.text().strip(),
                                                                     self.options())
            if ident < 0:
                return False
            self.accept()
            return True
        try:
            self.result_info = export_bundle([self.run_dir], self.path.text().strip(), **self.options())
        except RecordError as exc:
            self.state.reporter.report(messages.EXPORT_FAILED.format(message=exc))
            return False
        self.state.controller.sigMessage.emit(messages.EXPORT_DONE.format(
            path=self.result_info["bundle"], size=human_size(self.result_info["size"])))
        self.accept()
        return True


def show_export_dialog(window: QMainWindow, state: AppState) -> BundleExportDialog | None:
    """Open the export dialog (non-blocking) for the run shown in the timeline."""
    run_dir = state.timeline.run_dir
    if run_dir is None:
        state.controller.sigMessage.emit(messages.NO_RUN_SELECTED)
        return None
    dialog = BundleExportDialog(state, run_dir, window)
    dialog.finished.connect(dialog.deleteLater)
    dialog.open()
    return dialog

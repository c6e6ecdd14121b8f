"""File ▸ Export bug report…: the shown run as a bundle (.zip), its estimated size shown before saving.

Written here (record only, no torch) — unless "Include the first bad module's inputs" is ticked: that re-runs the
run, so the engine process writes the bundle (its `export` command); EngineExport follows the command in the
status bar and reports a failure in one line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject
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
from ghostviewer.record import RecordError
from ghostviewer.record.bundle import estimate_bundle_size, export_bundle

log = logging.getLogger("ghostviewer.gui")
INPUTS_BOX = "Include the first bad module's inputs (re-runs the run in the engine)"
INPUTS_TIP = ("Re-runs the run in the engine up to its first anomaly and adds that module's real inputs, weights "
              "and a standalone repro.py (runs/<run>/isolate/); when there are none, the bundle says why.")
INPUTS_ESTIMATE = " Plus the first bad module's inputs and weights (sized after the re-run)."
INPUTS_STARTED = "Exporting the bug report to {path}: the engine re-runs the run for the module's inputs…"
INPUTS_PROGRESS = "Exporting the bug report: re-running {run_id} to isolate {module}…"
INPUTS_DONE = "Bug report saved with the inputs of {module}: {path} ({size})."
INPUTS_NONE = "Bug report saved: {path} ({size}); no module inputs: {reason}"
NO_ENGINE = "the engine is not running (Engine ▸ Restart engine), or untick the module's inputs"
ENGINE_GONE = "the engine process stopped before the bundle was written"

def human_size(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} bytes"


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
            ident = engine_export(self.state).request(self.run_dir, self.path.text().strip(), self.options())
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


class EngineExport(QObject):
    """The engine's `export` commands (bundles with the first bad module's inputs): progress in the status bar,
    EXPORT_DONE when written, a one-line report when not. One per window, under the controller."""

    def __init__(self, state: AppState, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.pending: dict[int, str] = {}  # command id -> bundle path
        state.engine.sigEvent.connect(self._on_event)
        state.engine.sigEngineDied.connect(self._on_engine_died)

    def request(self, run_dir: str, path: str, options: dict[str, bool]) -> int:
        """Send the command; its id, or -1 (reported) when there is no engine to send it to."""
        ident = self.state.engine.send("export", run_dirs=[run_dir], out=path, **options) if path else -1
        if ident < 0:
            self.state.reporter.report(messages.EXPORT_FAILED.format(message=NO_ENGINE if path else "no file name"))
            return -1
        self.pending[ident] = path
        self.state.controller.set_engine_busy("export", True)  # queued runs wait for the re-run
        self._say(INPUTS_STARTED.format(path=path))
        return ident

    def _settle(self) -> None:
        if not self.pending:
            self.state.controller.set_engine_busy("export", False)

    def _on_event(self, event: dict[str, Any]) -> None:
        name, ident = event.get("event"), event.get("id")
        if ident not in self.pending:
            return
        if name == "export_progress":
            self._say(INPUTS_PROGRESS.format(run_id=event.get("run_id"), module=event.get("module")))
        elif name == "exported":
            self.pending.pop(ident)
            size = human_size(int(event.get("size") or 0))
            isolate = next((run.get("isolate") for run in event.get("runs") or [] if run.get("isolate")), None) or {}
            text = (INPUTS_DONE.format(module=isolate.get("module"), path=event.get("bundle"), size=size)
                    if isolate.get("folder") else
                    INPUTS_NONE.format(path=event.get("bundle"), size=size, reason=isolate.get("reason")))
            self._settle()
            self._say(text)
        elif name in ("export_failed", "error"):
            self.pending.pop(ident)
            self._settle()
            why = event.get("error") or event.get("message") or "unknown error"
            if name == "error":  # the scheduler reports an engine error already: the status bar only
                self._say(messages.EXPORT_FAILED.format(message=why))
            else:
                self.state.reporter.report(messages.EXPORT_FAILED.format(message=why))

    def _on_engine_died(self, _reason: str) -> None:
        if self.pending:
            self.pending.clear()
            self._settle()
            self.state.reporter.report(messages.EXPORT_FAILED.format(message=ENGINE_GONE))

    def _say(self, text: str) -> None:
        log.info(text)
        self.state.controller.sigMessage.emit(text)


def engine_export(state: AppState) -> EngineExport:
    """The window's EngineExport (made on first use; it outlives the dialogs)."""
    found = state.controller.findChild(EngineExport)
    return found if found is not None else EngineExport(state, state.controller)


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

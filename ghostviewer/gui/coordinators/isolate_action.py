"""Blocks ▸ right-click ▸ Isolate this module…: ask for a folder, have the engine isolate and fuzz the module
(through the IsolateCoordinator: isolate_coordinator.py), and show the fuzz table when it is done, broken inputs
in red."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QDialog, QFileDialog, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from ghostviewer.gui import messages

BROKEN = QColor("#7a2020")
COLUMNS = ("Vary", "Value", "NaN", "Inf", "Std", "Broken")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


class IsolateDialog(QDialog):
    """The isolated module, its repro and the fuzz table (one row per case, broken rows red)."""

    def __init__(self, result: dict[str, Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Isolated {result.get('module')}")
        self.resize(560, 520)
        output = result.get("output") or {}
        fuzz = result.get("fuzz") or {"cases": [], "broken": 0, "total": 0}
        repro = result.get("repro") or f"none: cannot be rebuilt ({result.get('reason')})"
        faults = ", ".join(result.get("faults") or [])
        lines = [f"{result.get('class')} at step {result.get('step')} → {result.get('out_dir')}",
                 f"repro: {repro}", f"real output: NaN {output.get('nan')}, Inf {output.get('inf')}",
                 f"fuzz: {fuzz['broken']} of {fuzz['total']} inputs break it"]
        if faults:
            lines.append(f"injected ghost-lab fault (written into repro.py as such): {faults}")
        self.summary = QLabel("\n".join(lines), wordWrap=True)
        self.table = QTableWidget(len(fuzz["cases"]), len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        for row, case in enumerate(fuzz["cases"]):
            out = case.get("output") or {}
            broken = case.get("why") or ("skipped" if case.get("skipped") else "")
            values = (case["vary"], case["value"], out.get("nan"), out.get("inf"), out.get("std"), broken)
            for column, value in enumerate(values):
                item = QTableWidgetItem(_cell(value))
                if case.get("skipped"):
                    item.setToolTip(case["skipped"])
                if case.get("broken"):
                    item.setBackground(QBrush(BROKEN))
                self.table.setItem(row, column, item)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)


class IsolateAction(QObject):
    sigDialog = Signal(object)  # the IsolateDialog shown for a result

    def __init__(self, state: Any, parent: QWidget, requests: Any = None,
                 ask_folder: Callable[[str], str] | None = None) -> None:
        """`requests`: a signal carrying module paths (BlockTree.isolateRequested), connected to `request`."""
        super().__init__(parent)
        self.state, self.parent_widget = state, parent
        self.coordinator = state.controller.isolates
        self.ask_folder = ask_folder or (lambda start: QFileDialog.getExistingDirectory(
            parent, "Isolate into folder", start))
        self.dialog: IsolateDialog | None = None
        self.coordinator.isolated.connect(self._show)
        if requests is not None:
            requests.connect(self.request)

    def request(self, module: str) -> int | None:
        """Ask where, then isolate `module` of the shown run at the shown step (the first anomaly's step for its
        own module); the command's id, None when nothing was sent."""
        run_dir = self.state.timeline.run_dir
        if not run_dir:
            self.state.controller.sigMessage.emit(messages.ISOLATE_NO_RUN)
            return None
        start = Path(self.state.history.runs_dir) / "isolated" / f"{Path(run_dir).name}-{module}"
        folder = self.ask_folder(str(start))
        if not folder:
            return None
        step = self.state.timeline.step
        if module == self.state.blocks.anomaly or step < 0:
            step = None  # the engine takes the first anomaly's step
        ident = self.coordinator.isolate(run_dir, module, step, folder)
        return ident if ident >= 0 else None

    def _show(self, result: dict[str, Any]) -> None:
        self.dialog = IsolateDialog(result, self.parent_widget)
        self.dialog.show()
        self.sigDialog.emit(self.dialog)

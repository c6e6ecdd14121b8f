"""The probe battery's report: one row per probe — passed or its finding, what it compared, the class of bug the
finding stands for — green or red; double-click a row to open the run that is its evidence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

COLUMNS = ("Probe", "Result", "Compared", "Bug class")
PASSED, FAILED, SKIPPED = QColor("#2e7d32"), QColor("#c62828"), QColor("#9e9e9e")
RUNS_ROLE = Qt.ItemDataRole.UserRole + 1


def summary_line(report: dict[str, Any]) -> str:
    """One line: how many probes passed, and the findings of those that did not."""
    findings = report.get("findings") or []
    failed = [f for f in findings if not f.get("ok")]
    if not failed:
        return f"Probes: all {len(findings)} passed ({report.get('runs')} runs, {report.get('elapsed_s')} s)"
    said = "; ".join(str(f.get("finding") or f.get("probe")) for f in failed)
    return f"Probes: {len(failed)} of {len(findings)} failed — {said}"


def result_words(finding: dict[str, Any]) -> str:
    if finding.get("skipped"):
        return f"skipped: {finding['skipped']}"
    return "passed" if finding.get("ok") else str(finding.get("finding") or "failed")


class ProbeReport(QDialog):
    def __init__(self, parent: QWidget | None = None, open_run: Callable[[str], Any] | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Probes of the loaded pipeline")
        self.open_run = open_run
        self.summary = QLabel(wordWrap=True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(True)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        header.resizeSection(2, 260)  # what was compared reads on two lines, the bug class takes the rest
        self.table.verticalHeader().setVisible(False)
        self.table.cellDoubleClicked.connect(self._open_evidence)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        layout.addWidget(QLabel("Double-click a probe to open the run that is its evidence."))
        layout.addWidget(buttons)
        self.resize(900, 420)

    def show_report(self, report: dict[str, Any]) -> None:
        findings = report.get("findings") or []
        self.summary.setText(summary_line(report))
        self.table.setRowCount(len(findings))
        for row, finding in enumerate(findings):
            colour = SKIPPED if finding.get("skipped") else PASSED if finding.get("ok") else FAILED
            values = (str(finding.get("probe", "")).replace("_", " "), result_words(finding),
                      str(finding.get("compared") or ""), str(finding.get("bug_class") or ""))
            for column, text in enumerate(values):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if column == 1:
                    item.setForeground(colour)
                item.setData(RUNS_ROLE, list((finding.get("evidence") or {}).get("runs") or []))
                self.table.setItem(row, column, item)
        self.table.resizeRowsToContents()
        self.show()
        self.raise_()

    def _open_evidence(self, row: int, _column: int) -> None:
        item = self.table.item(row, 0)
        runs = item.data(RUNS_ROLE) if item is not None else None
        if runs and self.open_run is not None:
            # a failed probe's last run is the one that shows the problem (the second of its pair)
            self.open_run(str(runs[-1]))

"""The bisection trail, live: each re-run with the blocks it bypassed, its verdict and whether the bad run's
symptom was still there, then the culprit (or why there is none). A click on a re-run opens it; "Compare with
the bad run" opens the comparison. Bound to the BisectCoordinator, which holds the trail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.analysis.symptom import describe_anomaly
from ghostviewer.gui.coordinators.bisect_coordinator import (
    BisectCoordinator,
    TrailEntry,
    describe_result,
    plan_words,
)
from ghostviewer.gui.widgets.stats_heatmap import short

COLUMNS = ("#", "bypassed", "verdict", "symptom", "first anomaly")
SYMPTOM = {True: ("yes", "#c62828"), False: ("no", "#2e7d32"), None: ("–", "#9e9e9e")}


def symptom_cell(entry: TrailEntry) -> tuple[str, str]:
    if entry.running:
        return (f"running {entry.step}/{entry.steps}" if entry.steps else "running…"), "#1565c0"
    return SYMPTOM.get(entry.symptom, SYMPTOM[None])


def bypassed_text(entry: TrailEntry) -> str:
    if entry.role != "trial":
        return f"({entry.role}: activation patching)"
    blocks = ", ".join(short(m) for m in entry.bypassed) or "(nothing)"
    return blocks if entry.from_step is None else f"{blocks} from step {entry.from_step}"


def searched_text(trail: list[TrailEntry], result: dict[str, Any] | None) -> str:
    """'searched from step 4, then 3, then the whole run': the steps the bypasses started from, in the order they
    ran (the re-runs' from_step; the result's planned `searched_from` before any re-run is known). Empty when every
    bypass covered the whole run."""
    starts: list[int | None] = []
    for entry in trail:
        if entry.role == "trial" and (not starts or starts[-1] != entry.from_step):
            starts.append(entry.from_step)
    if not trail and result:
        starts = [s if isinstance(s, int) else None for s in result.get("searched_from") or []]
    if not any(isinstance(s, int) for s in starts):
        return ""
    words = ["the whole run" if s is None else f"step {s}" if i == 0 else str(s) for i, s in enumerate(starts)]
    return "searched from " + ", then ".join(words)


class BisectTrail(QWidget):
    runRequested = Signal(str)  # open this run folder
    compareRequested = Signal(str, str)  # the bad run, a re-run

    def __init__(self, coordinator: BisectCoordinator, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.coordinator = coordinator
        self.header = QLabel()
        self.header.setWordWrap(True)
        self.bisect_button = QPushButton("Bisect shown run", toolTip="Find the block whose bypass removes the "
                                         "shown run's symptom (Run ▸ Bisect by bypass)")
        self.cancel_button = QPushButton("Cancel")
        self.compare_button = QPushButton("Compare with the bad run", toolTip="The selected re-run beside the bad run")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.result = QLabel()
        self.result.setWordWrap(True)  # the whole reason, on as many lines as it takes (the dock scrolls)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.result.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        buttons = QHBoxLayout()
        for button in (self.bisect_button, self.cancel_button, self.compare_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(buttons)
        layout.addWidget(self.header)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.result)
        self.table.setMinimumHeight(3 * self.table.verticalHeader().defaultSectionSize())
        self.bisect_button.clicked.connect(lambda: coordinator.bisect())
        self.cancel_button.clicked.connect(coordinator.cancel)
        self.compare_button.clicked.connect(self._compare)
        self.table.cellClicked.connect(lambda row, _col: self._open(row))
        self.table.itemSelectionChanged.connect(self._on_selection)
        coordinator.trailChanged.connect(self._rebuild)
        self._rebuild()

    def _rebuild(self) -> None:
        c = self.coordinator
        self.bisect_button.setEnabled(c.state == "idle")
        self.cancel_button.setEnabled(c.state != "idle")
        if c.run_dir:
            plan = plan_words(c)
            self.header.setText(f"<b>{Path(c.run_dir).name}</b> · symptom: {c.symptom or '?'}"
                                + (f" · {plan}" if plan else ""))
        else:
            self.header.setText("No bisection yet: show a failing run and press Bisect.")
        keep = self.table.currentRow()
        self.table.blockSignals(True)
        self.table.setRowCount(len(c.trail))
        for row, entry in enumerate(c.trail):
            self._fill_row(row, entry)
        if 0 <= keep < len(c.trail):
            self.table.selectRow(keep)
        self.table.blockSignals(False)
        self._on_selection()
        self._show_result()

    def _fill_row(self, row: int, entry: TrailEntry) -> None:
        symptom, colour = symptom_cell(entry)
        anomaly = describe_anomaly(entry.first_anomaly) if entry.first_anomaly else "none"
        texts = (str(entry.trial), bypassed_text(entry), entry.verdict or "", symptom, anomaly)
        tips = (entry.run_dir or "", "\n".join(entry.bypassed), entry.verdict or "", symptom, anomaly)
        culprit = (self.coordinator.result or {}).get("culprit")
        for col, (text, tip) in enumerate(zip(texts, tips, strict=True)):
            item = QTableWidgetItem(text)
            item.setToolTip(tip)
            if culprit and entry.role == "trial" and entry.bypassed == (culprit,):
                font = item.font()
                font.setBold(True)  # the re-run that bypassed the culprit alone
                item.setFont(font)
            if col == 3:
                item.setForeground(QBrush(QColor(colour)))
            self.table.setItem(row, col, item)

    def _show_result(self) -> None:
        c = self.coordinator
        if c.result is not None:
            text = describe_result(c.result)
            patching = c.result.get("patching")
            if isinstance(patching, dict):
                fixed = "makes the bad run healthy" if patching.get("healthy") else "does not make it healthy"
                text += f"<br>Patching {patching.get('module')} from a good run {fixed}."
            elif c.result.get("patching_note"):
                text += f"<br>Patching: {c.result['patching_note']}"
            searched = searched_text(c.trail, c.result)
            if searched:
                text += f"<br>Bypasses {searched}."
            colour = "#2e7d32" if c.result.get("culprit") else "#ef6c00"
            self.result.setText(f"<span style='color:{colour}'><b>{text}</b></span>")
        else:
            self.result.setText(c.error or ("running…" if c.state != "idle" else ""))

    def _entry(self, row: int) -> TrailEntry | None:
        trail = self.coordinator.trail
        return trail[row] if 0 <= row < len(trail) else None

    def _open(self, row: int) -> None:
        entry = self._entry(row)
        if entry is not None and entry.run_dir and not entry.running:
            self.runRequested.emit(entry.run_dir)

    def _on_selection(self) -> None:
        entry = self._entry(self.table.currentRow())
        self.compare_button.setEnabled(bool(entry and entry.run_dir and not entry.running
                                            and self.coordinator.run_dir))

    def _compare(self) -> None:
        entry = self._entry(self.table.currentRow())
        if entry is not None and entry.run_dir and self.coordinator.run_dir:
            self.compareRequested.emit(self.coordinator.run_dir, entry.run_dir)


def build_bisect_trail(state: Any) -> BisectTrail:
    """The trail view on the controller's bisection: a clicked re-run opens in the timeline, "Compare with the
    bad run" opens the comparison."""
    trail = BisectTrail(state.controller.bisects)
    trail.runRequested.connect(state.opener.open_run)
    trail.compareRequested.connect(state.controller.compare_runs)
    return trail

"""The Compare dock: two runs side by side. Settings with the differences highlighted, the first divergence (a
click moves both timelines there and focuses its module), the shown step of A and B with |A−B| and the two
final images with theirs, one slider scrubbing both timelines, and the per-module delta heat map. Bound to
CompareModel; the step images come from the two step-data models (A: the shown run, B: the second slot).

Readable at any width: the two runs' ids on a line of their own (cut with '…' only when the dock is too narrow
for them, the whole line in the tooltip), the picker showing run B, the settings' columns as wide as their
texts (the table scrolls sideways rather than cut a value), and the three parts side by side only where each
has room (WIDE_PX); narrower (the centre column at 1280 or 1366 px), they are tabs across the whole width."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSlider,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTreeWidget,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.analysis.compare import describe_divergence
from ghostviewer.gui.models.compare_model import CompareModel, step_image
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.step_data_model import StepDataModel
from ghostviewer.gui.widgets.delta_heatmap import DeltaHeatmap
from ghostviewer.gui.widgets.elided_label import ElidedButton, ElidedLabel
from ghostviewer.gui.widgets.history_panel import KIND_ROLE, PATH_ROLE
from ghostviewer.gui.widgets.image_pane import ImagePane

DIFF_BACKGROUND = "#5d3a00"
SIZE_HINT = (860, 300)
WIDE_PX = 1100  # from this width the settings, the images and the heat map stand side by side
PARTS = ("Settings", "Images", "Δ per module")
PICKER_RUNS, PICKER_STUDIES = 300, 30  # the newest (older runs: select two in the history, Ctrl+K)
PICKER_CHILDREN = 40  # a study's first runs (a sweep of 10,000 would make the list, and each refresh, crawl)
PANES = ("A step", "B step", "|A−B| step", "A final", "B final", "|A−B| final")


def selected_runs(tree: QTreeWidget) -> list[str]:
    """The run folders selected in the history tree (runs and study children; studies themselves are not runs)."""
    return [str(item.data(0, PATH_ROLE)) for item in tree.selectedItems() if item.data(0, KIND_ROLE) != "study"]


def value_text(value: object) -> str:
    return "—" if value is None else str(value)


class CompareView(QWidget):
    def __init__(self, model: CompareModel, data_a: StepDataModel, data_b: StepDataModel,
                 history: HistoryModel | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model, self.history = model, history
        self.title = ElidedLabel()
        self.title.set_full_text(NO_COMPARISON, NO_COMPARISON_TIP)
        self.picker = QComboBox(toolTip="Run B: the run compared with the shown run (A); pick another and press "
                                        "Compare with…")
        self.picker.setMinimumContentsLength(10)
        self.picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.picker.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.compare_button = QPushButton("Compare with…", toolTip="Compare the shown run (A) with the picked run (B)")
        self.swap = QPushButton("Swap A ⇄ B")
        self.show_a = QPushButton("Show A", toolTip="Run A is not the shown run: show it again")
        self.divergence = ElidedButton(toolTip="Move both timelines to the first divergence")
        self.settings = QTableWidget(0, 3)
        self.settings.setHorizontalHeaderLabels(["setting", "A", "B"])
        self.settings.verticalHeader().hide()
        self.settings.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.settings.horizontalHeader().setStretchLastSection(True)
        self.settings.setHorizontalScrollMode(QTableWidget.ScrollMode.ScrollPerPixel)
        self.settings.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.settings.setWordWrap(False)
        self.settings.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.settings.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.settings.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.panes = {name: ImagePane(name) for name in PANES}
        self.slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=0, toolTip="Both runs' step")
        self.step_label = QLabel("no step")
        self.heatmap = DeltaHeatmap(model)
        self._layout()
        model.comparisonChanged.connect(self._on_comparison)
        model.stepDiffChanged.connect(self._on_steps)
        model.timeline_a.runChanged.connect(self._on_run)
        model.timeline_a.stepsChanged.connect(lambda _n: self._on_run())
        model.timeline_a.stepChanged.connect(lambda _s: self._on_step())
        self.slider.valueChanged.connect(model.set_position)
        self.divergence.clicked.connect(model.go_to_divergence)
        self.swap.clicked.connect(model.swap)
        self.show_a.clicked.connect(model.show_a)
        self.compare_button.clicked.connect(self._compare_picked)
        data_a.attach(self, lambda: data_a.ready())
        data_b.attach(self, lambda: data_b.ready())
        if history is not None:
            history.changed.connect(self._fill_picker)
            self._fill_picker()
        self._on_comparison()

    def _layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("<b>B</b>"))
        top.addWidget(self.picker, 1)
        for widget in (self.compare_button, self.swap, self.show_a):
            top.addWidget(widget)
        images = QWidget()
        grid = QGridLayout(images)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(1)
        for i, name in enumerate(PANES):
            grid.addWidget(self.panes[name], i // 3, i % 3)
        scrub = QHBoxLayout()
        scrub.addWidget(self.slider, 1)
        scrub.addWidget(self.step_label)
        grid.addLayout(scrub, 2, 0, 1, 3)
        self.parts = dict(zip(PARTS, (self.settings, images, self.heatmap), strict=True))
        self.side_by_side = QWidget()
        self.row = QHBoxLayout(self.side_by_side)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.tabs = QTabWidget(documentMode=True)
        for widget in self.parts.values():
            widget.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Expanding)  # shared by stretch only
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.setSpacing(2)
        layout.addWidget(self.title)
        layout.addLayout(top)
        layout.addWidget(self.divergence)
        layout.addWidget(self.side_by_side, 1)
        layout.addWidget(self.tabs, 1)
        self.wide: bool | None = None
        self._arrange(False)

    def _arrange(self, wide: bool) -> None:
        """The three parts side by side (wide) or as tabs, each then as wide as the dock."""
        if wide == self.wide:
            return
        self.wide = wide
        current = self.tabs.currentIndex()
        if wide:
            self.tabs.clear()
            for widget, stretch in zip(self.parts.values(), (3, 4, 4), strict=True):
                self.row.addWidget(widget, stretch)
                widget.show()
        else:
            for name, widget in self.parts.items():
                self.row.removeWidget(widget)
                self.tabs.addTab(widget, name)
            self.tabs.setCurrentIndex(max(current, 1))  # the images first
        self.side_by_side.setVisible(wide)
        self.tabs.setVisible(not wide)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._arrange(self.width() >= WIDE_PX)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(*SIZE_HINT)  # the panes and the heat map ask for far more: the dock would crowd the window

    # -- the comparison ---------------------------------------------------------------------------
    def _on_comparison(self) -> None:
        c = self.model.comparison
        self.swap.setEnabled(c is not None)
        if c is None:
            self.title.set_full_text(NO_COMPARISON, NO_COMPARISON_TIP)
            self.divergence.set_full_text(self.model.error or "")
            self.settings.setRowCount(0)
            for name in PANES[3:]:
                self.panes[name].set_image(None)
            self._on_run()
            return
        (id_a, id_b), (va, vb) = c.ids, c.verdicts
        self.title.set_full_text(f"A {id_a} ({va or '?'})   vs   B {id_b} ({vb or '?'})")
        if c.same:
            self.divergence.set_full_text("Identical: every recorded output is bit-identical")
        else:
            self.divergence.set_full_text("First divergence: " + describe_divergence(c.first_divergence or {}) + "  ➜")
        self.divergence.setEnabled(not c.same)
        self._show_b_in_picker()
        self._fill_settings()
        self.panes["A final"].set_image(c.final_a, f"A final · {va or '?'}")
        self.panes["B final"].set_image(c.final_b, f"B final · {vb or '?'}")
        gain = f" ×{c.final_gain:.2g}" if c.final_diff is not None else " (sizes differ)"
        self.panes["|A−B| final"].set_image(c.final_diff, "|A−B| final" + gain)
        self._on_run()

    def _fill_settings(self) -> None:
        c = self.model.comparison
        rows = c.settings if c is not None else ()
        self.settings.setRowCount(len(rows))
        bold = QFont(self.font())
        bold.setBold(True)
        for i, row in enumerate(rows):
            cells = [QTableWidgetItem(text) for text in (row.name, value_text(row.a), value_text(row.b))]
            for j, cell in enumerate(cells):
                cell.setToolTip(cell.text())
                if row.differs:
                    cell.setBackground(QBrush(QColor(DIFF_BACKGROUND)))
                    cell.setFont(bold)
                self.settings.setItem(i, j, cell)
        self.settings.resizeColumnsToContents()

    # -- the steps --------------------------------------------------------------------------------
    def _on_run(self) -> None:
        timeline = self.model.timeline_a
        self.show_a.setVisible(self.model.comparison is not None and not self.model.a_shown)
        self.slider.blockSignals(True)
        self.slider.setMaximum(max(timeline.count - 1, 0))
        self.slider.blockSignals(False)
        self._on_step()

    def _on_step(self) -> None:
        timeline_a, timeline_b = self.model.timeline_a, self.model.timeline_b
        self.slider.blockSignals(True)
        self.slider.setValue(max(timeline_a.position, 0))
        self.slider.blockSignals(False)
        b = f" · B step {timeline_b.step}" if timeline_b.step != timeline_a.step else ""
        self.step_label.setText("no step" if timeline_a.step < 0 else f"step {timeline_a.step}{b}")

    def _on_steps(self) -> None:
        m = self.model
        self.panes["A step"].set_image(step_image(m.step_a) if m.comparison else None,
                                       f"A step {m.step_a.step}" if m.step_a and not m.step_a.empty else "A step")
        self.panes["B step"].set_image(step_image(m.step_b) if m.comparison else None,
                                       f"B step {m.step_b.step}" if m.step_b and not m.step_b.empty else "B step")
        gain = f" ×{m.step_gain:.2g}" if m.step_diff is not None else ""
        self.panes["|A−B| step"].set_image(m.step_diff, "|A−B|" + gain)

    # -- picking B --------------------------------------------------------------------------------
    def _fill_picker(self) -> None:
        if self.history is None:
            return
        keep = self.picker.currentData()
        self.picker.blockSignals(True)
        self.picker.clear()
        for entry in self.history.entries[:PICKER_RUNS]:
            self.picker.addItem(f"{entry.run_id} · seed {entry.seed} · {entry.state(None)}", entry.path)
        for study in self.history.studies[:PICKER_STUDIES]:
            for child in study.children[:PICKER_CHILDREN]:
                self.picker.addItem(f"{Path(child.path).name} · {study.kind} #{child.position} {child.role} · "
                                    f"{child.state()}", child.path)
        self.picker.blockSignals(False)
        if not self._show_b_in_picker():
            self._select_in_picker(keep)

    def _select_in_picker(self, path: object) -> bool:
        wanted = None if path is None else Path(str(path))
        index = next((i for i in range(self.picker.count())
                      if wanted is not None and Path(str(self.picker.itemData(i))) == wanted), -1)
        if index < 0 and wanted is not None and self.model.comparison is not None \
                and wanted == Path(self.model.comparison.run_b):  # B not (yet) in the history: listed anyway
            self.picker.insertItem(0, f"{self.model.comparison.ids[1]} · {self.model.comparison.verdicts[1] or '?'}",
                                   str(wanted))
            index = 0
        self.picker.blockSignals(True)
        self.picker.setCurrentIndex(max(index, 0) if self.picker.count() else -1)
        self.picker.blockSignals(False)
        self.picker.setToolTip(self.picker.currentText() or "A run to compare the shown run with")
        return index >= 0

    def _show_b_in_picker(self) -> bool:
        """The picker shows run B of the comparison on screen (never another run)."""
        c = self.model.comparison
        return c is not None and self._select_in_picker(c.run_b)

    def _compare_picked(self) -> None:
        path = self.picker.currentData()
        if path:
            self.model.compare_with(str(path))


NO_COMPARISON = "No comparison yet: select two runs in the history and press Ctrl+K, or pick one here"
NO_COMPARISON_TIP = ("Run ▸ Compare selected runs (Ctrl+K): the two runs selected in the history (Ctrl+click)."
                     "\nCompare with…: the shown run (A) beside the run picked here (B).")


def build_compare_view(state: Any) -> CompareView:
    """The Compare dock's view on the window's state (the controller's comparison, both step-data slots)."""
    return CompareView(state.controller.compare, state.step_data, state.step_data_b, state.history)

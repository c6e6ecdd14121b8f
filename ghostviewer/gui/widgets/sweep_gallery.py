"""The sweep gallery dock: thumbnails of a sweep's runs with verdict badges and first-anomaly labels, filters by
verdict / prompt / seed, sorting, failure rates per prompt and per seed (sweep_rates.py), the Seeds field for
dropped lists, and the sweep's progress. A click on a thumbnail emits the run folder (`runActivated`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.coordinators.sweep_coordinator import SweepCoordinator
from ghostviewer.gui.models.sweep_model import ALL, ANOMALY, FAILED, RUN_DIR, SORTS, VERDICT, SweepModel
from ghostviewer.gui.widgets.sweep_rates import SweepRates

THUMB = 96
CELL = QSize(THUMB + 12, THUMB + 40)
BADGE_OK, BADGE_BAD = QColor("#2e7d32"), QColor("#c62828")


class ThumbnailDelegate(QStyledItemDelegate):
    """Paints a run: its final image, a verdict badge on it, the seed and first anomaly below."""

    def sizeHint(self, _option: QStyleOptionViewItem, _index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        return CELL

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        rect: QRect = option.rect  # type: ignore[attr-defined]
        painter.save()
        if option.state & option.state.State_Selected:  # type: ignore[attr-defined]
            painter.fillRect(rect, option.palette.highlight())  # type: ignore[attr-defined]
        image = index.data(Qt.ItemDataRole.DecorationRole)
        box = QRect(rect.x() + 6, rect.y() + 4, THUMB, THUMB)
        if image is not None and not image.isNull():
            painter.drawImage(box, image)
        else:
            painter.fillRect(box, QColor("#424242"))
        failed = bool(index.data(FAILED))
        badge = QRect(box.x(), box.y(), THUMB, 16)
        painter.fillRect(badge, BADGE_BAD if failed else BADGE_OK)
        painter.setPen(QColor("white"))
        painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, str(index.data(VERDICT)))
        painter.setPen(option.palette.text().color())  # type: ignore[attr-defined]
        metrics = painter.fontMetrics()
        seed = QRect(rect.x() + 2, box.bottom() + 2, rect.width() - 4, 16)
        painter.drawText(seed, Qt.AlignmentFlag.AlignCenter, str(index.data(Qt.ItemDataRole.DisplayRole)))
        anomaly = str(index.data(ANOMALY) or "")
        if anomaly:
            painter.setPen(BADGE_BAD)
            text = metrics.elidedText(anomaly, Qt.TextElideMode.ElideLeft, seed.width())
            painter.drawText(seed.translated(0, 16), Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()


class SweepGallery(QWidget):
    runActivated = Signal(str)  # a run folder, to open in the timeline
    replayRequested = Signal(str)  # a run folder (the thumbnail's menu: failing seeds are one click away)
    bisectRequested = Signal(str)
    compareRequested = Signal(str, str)  # the run, a healthy run of the same prompt

    def __init__(self, model: SweepModel, coordinator: SweepCoordinator | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model, self.coordinator = model, coordinator
        self.seeds = QLineEdit("0-9")
        self.seeds.setToolTip("Seeds for a dropped prompt list: 0-99, 1,5,9 or a mix")
        self.seeds.setMaximumWidth(120)
        self.open_button = QPushButton("Sweep a list…")
        self.cancel_button = QPushButton("Cancel")
        self.resume_button = QPushButton("Resume")
        self.on_ray = QCheckBox("on Ray")
        self.on_ray.setToolTip("Run sweeps on Ray actors (a running cluster, else a local one); needs ghostviewer[ray]")
        self.progress = QProgressBar()
        self.progress.setFormat("%v/%m runs")
        self.status = QLabel("Drop a prompt list on the window to sweep it.")
        self.verdict = QComboBox()
        self.prompt = QComboBox()
        self.seed_filter = QLineEdit()
        self.seed_filter.setPlaceholderText("seed")
        self.seed_filter.setMaximumWidth(70)
        self.sort = QComboBox()
        self.sort.addItems([f"sort: {s}" for s in SORTS])
        self.view = QListView()
        self.view.setViewMode(QListView.ViewMode.IconMode)
        self.view.setResizeMode(QListView.ResizeMode.Adjust)
        self.view.setMovement(QListView.Movement.Static)
        self.view.setUniformItemSizes(True)
        self.view.setGridSize(CELL)
        self.view.setItemDelegate(ThumbnailDelegate(self.view))
        self.view.setModel(model)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.rates = SweepRates(model)
        self._layout()
        self.seeds.textChanged.connect(self._on_seeds)
        self.open_button.clicked.connect(self._choose_list)
        self.verdict.activated.connect(self._on_filter)
        self.prompt.activated.connect(self._on_filter)
        self.seed_filter.editingFinished.connect(self._on_filter)
        self.sort.activated.connect(lambda i: model.set_sort(SORTS[i]))
        self.view.clicked.connect(self._on_clicked)
        self.view.customContextMenuRequested.connect(self._menu)
        self.rates.rowChosen.connect(self.filter_to)
        model.changed.connect(self._on_model_changed)
        if coordinator is not None:
            self.cancel_button.clicked.connect(coordinator.cancel)
            self.resume_button.clicked.connect(lambda: model.study_dir and coordinator.resume(model.study_dir))
            coordinator.progressed.connect(self.show_progress)
            coordinator.stateChanged.connect(self._on_state)
            coordinator.sigMessage.connect(self.status.setText)
            self.on_ray.toggled.connect(coordinator.set_ray)
        self._on_state("idle")
        self._on_model_changed()

    def _layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("Seeds"))
        top.addWidget(self.seeds)
        for widget in (self.on_ray, self.open_button, self.cancel_button, self.resume_button):
            top.addWidget(widget)
        top.addWidget(self.progress, 1)
        filters = QHBoxLayout()
        for widget in (self.verdict, self.prompt, self.seed_filter, self.sort):
            filters.addWidget(widget)
        filters.addStretch(1)
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.addLayout(filters)
        column.addWidget(self.view, 1)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(self.rates)
        split.setSizes([640, 320])
        outer = QVBoxLayout(self)
        outer.setContentsMargins(2, 2, 2, 2)
        outer.addLayout(top)
        outer.addWidget(self.status)
        outer.addWidget(split, 1)

    # -- model and coordinator --------------------------------------------------------------------
    def _on_model_changed(self) -> None:
        m = self.model
        self._fill(self.verdict, [("all verdicts", ALL), ("failed", "failed"), *[(v, v) for v in m.verdicts()]],
                   m.verdict_filter)
        self._fill(self.prompt, [("all prompts", ALL), *[(p[:40], p) for p in m.prompts()]], m.prompt_filter)
        total = m.progress.get("total") or len(m.entries)
        if self.coordinator is None or self.coordinator.state == "idle":
            self.progress.setRange(0, max(int(total), 1))
            self.progress.setValue(min(int(m.progress.get("done") or len(m.entries)), max(int(total), 1)))
        if m.study_dir and (self.coordinator is None or self.coordinator.state == "idle"):
            self.status.setText(f"{Path(m.study_dir).name}: {m.status}, {m.stats.summary()}")
        self.resume_button.setEnabled(bool(m.study_dir) and m.status != "done")

    @staticmethod
    def _fill(combo: QComboBox, items: list[tuple[str, str]], current: str) -> None:
        if [combo.itemData(i) for i in range(combo.count())] == [value for _, value in items]:
            return
        combo.clear()
        for text, value in items:
            combo.addItem(text, value)
        combo.setCurrentIndex(max(0, combo.findData(current)))

    def show_progress(self, event: dict[str, Any]) -> None:
        total, done = int(event.get("total") or 0), int(event.get("done") or 0)
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        eta = event.get("eta")
        left = f", {int(eta) // 60}:{int(eta) % 60:02d} left" if isinstance(eta, (int, float)) else ""
        self.status.setText(f"{done}/{total} runs, {event.get('failed_total', 0)} failed, "
                            f"{float(event.get('rate') or 0):.2f} runs/s{left}")

    def _on_state(self, state: str) -> None:
        self.cancel_button.setEnabled(state != "idle")
        self.open_button.setEnabled(state == "idle")

    # -- user actions -----------------------------------------------------------------------------
    def _on_seeds(self) -> None:
        if self.coordinator is not None:
            self.coordinator.set_seeds(self.seeds.text().strip() or "0-9")

    def _choose_list(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Sweep a prompt list", "",
                                              "Prompt lists (*.txt *.csv *.jsonl *.json)")
        if path:
            if self.coordinator is not None:
                self.coordinator.start(path, self.seeds.text().strip() or "0-9")

    def _on_filter(self) -> None:
        self.model.set_filter(verdict=self.verdict.currentData() or ALL, prompt=self.prompt.currentData() or ALL,
                              seed=self.seed_filter.text())

    def filter_to(self, kind: str, value: str) -> None:
        """Show only one prompt or one seed (from the failure-rate table)."""
        if kind == "prompt":
            self.prompt.setCurrentIndex(max(0, self.prompt.findData(value)))
        else:
            self.seed_filter.setText(value)
        self._on_filter()

    def _on_clicked(self, index: QModelIndex) -> None:
        run_dir = index.data(RUN_DIR)
        if run_dir:
            self.runActivated.emit(str(run_dir))

    def menu_actions(self, run_dir: str) -> list[tuple[str, Callable[[], None] | None]]:
        """The thumbnail menu: open, replay, bisect, compare with a healthy seed of the same prompt."""
        twin = self.model.healthy_twin(run_dir)
        compare = (lambda: self.compareRequested.emit(run_dir, twin)) if twin else None
        return [("Open in the timeline", lambda: self.runActivated.emit(run_dir)),
                ("Replay this seed", lambda: self.replayRequested.emit(run_dir)),
                ("Bisect this run", lambda: self.bisectRequested.emit(run_dir)),
                ("Compare with a healthy seed", compare)]

    def _menu(self, pos: QPoint) -> None:
        index = self.view.indexAt(pos)
        if not index.isValid():
            return
        menu = QMenu(self)
        for text, slot in self.menu_actions(str(index.data(RUN_DIR))):
            action = menu.addAction(text)
            action.setEnabled(slot is not None)
            if slot is not None:
                action.triggered.connect(slot)
        menu.popup(self.view.viewport().mapToGlobal(pos))


def build_sweep_gallery(state: Any) -> SweepGallery:
    """The gallery with its model and coordinator, wired to the window's state: dropped prompt lists start
    sweeps (state.opener), a clicked thumbnail opens its run in the timeline (state.opener.open_run)."""
    model = SweepModel()
    coordinator = SweepCoordinator(state.engine, state.controller, state.prompt, state.pipeline, state.blocks,
                                   state.history, state.reporter, model)
    gallery = SweepGallery(model, coordinator)
    model.setParent(gallery)
    coordinator.setParent(gallery)
    gallery.runActivated.connect(state.opener.open_run)
    gallery.replayRequested.connect(lambda run_dir: state.controller.replay(run_dir))
    gallery.bisectRequested.connect(lambda run_dir: state.controller.bisect(run_dir))
    gallery.compareRequested.connect(lambda a, b: state.controller.compare_runs(a, b))
    state.opener.sweeps = coordinator
    return gallery

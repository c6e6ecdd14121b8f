"""The sweep gallery dock: a sweep's runs as a prompt × seed grid (a seed failing every prompt is a red column)
or as a list of thumbnails with first-anomaly labels, sortable; verdict badges, failing runs framed in red,
filters by verdict / prompt / seed, failure rates per prompt and per seed (sweep_rates.py), the Seeds field for
dropped lists, and the sweep's progress. A click on a thumbnail emits the run folder (`runActivated`).

Room (1280×720 and 1366×768 leave the bottom dock ~560–650 px by ~270–380): the grid's cells are at least 64 px
(a thumbnail and its badge readable); beyond that the grid scrolls sideways a column at a time, as many whole
columns shown as fit (none cut at the edge), its prompt column staying put; the rates pane beside it shows only
where the gallery is wide (WIDE_PX) or when asked for ("rates"), so the grid keeps the room; and the gallery's own
minimum height stays below the dock's, so the dock never scrolls it (which hid the grid's last column and scroll
bar out of sight)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPersistentModelIndex, QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QMainWindow,
    QMenu,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.coordinators.sweep_coordinator import SweepCoordinator
from ghostviewer.gui.models.sweep_model import (
    ALL,
    ANOMALY,
    FAILED,
    RUN_DIR,
    SORTS,
    VERDICT,
    SweepGridModel,
    SweepModel,
)
from ghostviewer.gui.models.verdict_words import short_words
from ghostviewer.gui.widgets.sweep_rates import SweepRates
from ghostviewer.spec.seeds import SeedSpecError, parse_seeds

THUMB = 80  # the list's thumbnails (the demo's images are 64 px)
CELL = QSize(THUMB + 12, THUMB + 38)
SEEDS_TIP = "Seeds for a dropped prompt list: 0-99, 1,5,9 or a mix"
OPEN_TIP = "Pick a prompt list and sweep it × these seeds"
GRID_CELL = (64, 96)  # the grid's cells: as wide as fits all seeds in the view, within these bounds
GRID_MIN_H = 110  # the grid's own minimum height: its header, one row of cells and the sideways scroll bar
WIDE_PX = 820  # a gallery at least this wide shows the rates pane beside the grid unless told otherwise
RATES_TIP = "Failure rates per prompt and per seed, beside the grid (the grid's headers carry them too)"
LINE = 16  # a text line under a list thumbnail
BADGE_OK, BADGE_BAD = QColor("#2e7d32"), QColor("#c62828")
VIEWS = ("grid", "list")


def _whole_across(cell: QRect, view: QRect) -> bool:
    """The cell's whole width is inside the view (a row cut at the bottom still draws: it reads as scrolling)."""
    return cell.left() >= view.left() and cell.right() <= view.right()


class ThumbnailDelegate(QStyledItemDelegate):
    """Paints a run: its final image, a verdict badge on it and, for a failing run, a red frame; in the list
    (labels=True) also the seed and the first anomaly below. In the grid a healthy run's badge is a thin green
    strip (its verdict is "ok"), so the images show and the failing ones stand out."""

    def __init__(self, labels: bool, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.labels = labels

    def sizeHint(self, _option: QStyleOptionViewItem, _index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        return CELL if self.labels else QSize(GRID_CELL[1], GRID_CELL[1])

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        rect: QRect = option.rect  # type: ignore[attr-defined]
        if index.data(RUN_DIR) is None:
            return  # an empty grid cell: that prompt and seed were not run (or are filtered out)
        view = option.widget  # type: ignore[attr-defined]
        if not self.labels and isinstance(view, QTableView) and not _whole_across(rect, view.viewport().rect()):
            return  # a column at the grid's left or right edge shown only in part: left blank, never cut
        painter.save()
        if option.state & option.state.State_Selected:  # type: ignore[attr-defined]
            painter.fillRect(rect, option.palette.highlight())  # type: ignore[attr-defined]
        side = min(rect.width(), rect.height() - (2 * LINE + 2 if self.labels else 0)) - 6
        box = QRect(rect.x() + (rect.width() - side) // 2, rect.y() + 3, side, side)
        image = index.data(Qt.ItemDataRole.DecorationRole)
        if image is not None and not image.isNull():
            painter.drawImage(box, image)
        else:
            painter.fillRect(box, QColor("#424242"))
        failed = bool(index.data(FAILED))
        metrics = painter.fontMetrics()
        verdict = str(index.data(VERDICT))
        text = failed or self.labels
        badge = QRect(box.x(), box.y(), side, min(LINE, metrics.height() + 2) if text else 4)
        painter.fillRect(badge, BADGE_BAD if failed else BADGE_OK)
        if text:
            painter.setPen(QColor("white"))
            if metrics.horizontalAdvance(verdict) > side - 2:  # "ok · drift" -> "drift": never a bare "ok"
                verdict = short_words(verdict)
            painter.drawText(badge, Qt.AlignmentFlag.AlignCenter,
                             metrics.elidedText(verdict, Qt.TextElideMode.ElideRight, side - 2))
        if failed:
            painter.setPen(QPen(BADGE_BAD, 3))
            painter.drawRect(box.adjusted(1, 1, -1, -1))
        if self.labels:
            painter.setPen(option.palette.text().color())  # type: ignore[attr-defined]
            seed = QRect(rect.x() + 2, box.bottom() + 2, rect.width() - 4, LINE)
            label = metrics.elidedText(str(index.data(Qt.ItemDataRole.DisplayRole)), Qt.TextElideMode.ElideRight,
                                       seed.width())
            painter.drawText(seed, Qt.AlignmentFlag.AlignCenter, label)
            anomaly = str(index.data(ANOMALY) or "")
            if anomaly:
                painter.setPen(BADGE_BAD)
                text = metrics.elidedText(anomaly, Qt.TextElideMode.ElideLeft, seed.width())
                painter.drawText(seed.translated(0, LINE), Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()


class SweepGrid(QTableView):
    """The prompt × seed grid; its cells shrink (down to GRID_CELL[0]) so that all the seeds fit its width."""

    def __init__(self, model: SweepGridModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setModel(model)
        self.setItemDelegate(ThumbnailDelegate(labels=False, parent=self))
        self.setShowGrid(False)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)  # no width jitter when it shows
        # a column (a row) at a time: with whole columns in the width, none is ever cut, the last one included
        self.setHorizontalScrollMode(QTableView.ScrollMode.ScrollPerItem)
        self.setVerticalScrollMode(QTableView.ScrollMode.ScrollPerItem)
        self.setMinimumHeight(GRID_MIN_H)
        self.setSelectionMode(QTableView.SelectionMode.SingleSelection)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        for header in (self.horizontalHeader(), self.verticalHeader()):
            header.setSectionResizeMode(header.ResizeMode.Fixed)
            header.setHighlightSections(False)
        model.modelReset.connect(self.fit_cells)
        model.headerDataChanged.connect(lambda *_a: self.fit_cells())
        model.dataChanged.connect(self._on_data_changed)

    def _on_data_changed(self, _first: QModelIndex, _last: QModelIndex, roles: list[int] | None = None) -> None:
        if list(roles or ()) != [Qt.ItemDataRole.DecorationRole]:  # images coming in change no header
            self.fit_headers()

    def fit_headers(self) -> None:
        """The prompt rows' header as wide as its widest text, drawn bold ("2  50 %" never cut to "  50 %")."""
        font = QFont(self.verticalHeader().font())
        font.setBold(True)
        metrics = QFontMetrics(font)
        model = self.model()
        texts = [str(model.headerData(r, Qt.Orientation.Vertical) or "") for r in range(model.rowCount())]
        width = max((metrics.horizontalAdvance(t) for t in texts), default=0) + 14
        if self.verticalHeader().minimumWidth() != width:
            self.verticalHeader().setMinimumWidth(width)

    def cell_size(self) -> int:
        """All the seeds in the view's width when they fit at GRID_CELL[0] or more; else as many whole columns as
        fit (scrolled a column at a time), so that no column is ever cut at the view's edge."""
        columns, width = max(1, self.model().columnCount()), self.viewport().width()
        shown = columns if columns * GRID_CELL[0] <= width else max(1, width // GRID_CELL[0])
        return max(GRID_CELL[0], min(GRID_CELL[1], width // shown))

    def fit_cells(self) -> None:
        size = self.cell_size()
        self.horizontalHeader().setDefaultSectionSize(size)
        self.verticalHeader().setDefaultSectionSize(size)
        self.fit_headers()

    def resizeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)  # type: ignore[arg-type]
        self.fit_cells()


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
        self.seeds.setToolTip(SEEDS_TIP)
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
        self.seed_filter.setMaximumWidth(56)
        self.seed_filter.setMinimumWidth(44)
        for combo, letters in ((self.verdict, 11), (self.prompt, 11)):  # "all verdicts", "all prompts"
            combo.setMinimumContentsLength(letters)
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.sort = QComboBox()
        self.sort.addItems([f"sort: {s}" for s in SORTS])
        self.sort.setToolTip("The list's order (the grid keeps prompts in list order and seeds ascending)")
        self.shape = QComboBox()
        self.shape.addItems(list(VIEWS))
        self.shape.setToolTip("grid: a row per prompt, a column per seed; list: thumbnails with their first "
                              "anomaly, sortable")
        self.grid_model = SweepGridModel(model, self)
        self.grid = SweepGrid(self.grid_model)
        self.view = QListView()
        self.view.setViewMode(QListView.ViewMode.IconMode)
        self.view.setResizeMode(QListView.ResizeMode.Adjust)
        self.view.setMovement(QListView.Movement.Static)
        self.view.setUniformItemSizes(True)
        self.view.setGridSize(CELL)
        self.view.setItemDelegate(ThumbnailDelegate(labels=True, parent=self.view))
        self.view.setModel(model)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.views = QStackedWidget()
        self.views.addWidget(self.grid)
        self.views.addWidget(self.view)
        self.rates = SweepRates(model)
        self.rates_button = QToolButton(text="rates", checkable=True, toolTip=RATES_TIP)
        self._rates_chosen = False  # the user toggled the rates pane: the width no longer decides
        self._layout()
        self.seeds.textChanged.connect(self._on_seeds)
        self.open_button.clicked.connect(self._choose_list)
        self.verdict.activated.connect(self._on_filter)
        self.prompt.activated.connect(self._on_filter)
        self.seed_filter.editingFinished.connect(self._on_filter)
        self.sort.activated.connect(lambda i: model.set_sort(SORTS[i]))
        self.shape.activated.connect(self.set_view)
        for view in (self.view, self.grid):
            view.clicked.connect(self._on_clicked)
            view.customContextMenuRequested.connect(lambda pos, view=view: self._menu(view, pos))
        self.rates.rowChosen.connect(self.filter_to)
        self.rates_button.clicked.connect(self._on_rates_clicked)
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
        self.set_view(0)

    def _layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("Seeds"))
        top.addWidget(self.seeds)
        for widget in (self.on_ray, self.open_button, self.cancel_button, self.resume_button):
            top.addWidget(widget)
        top.addWidget(self.progress, 1)
        filters = QHBoxLayout()
        for widget in (self.shape, self.verdict, self.prompt, self.seed_filter, self.sort):
            filters.addWidget(widget)
        filters.addStretch(1)
        filters.addWidget(self.rates_button)
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.addLayout(filters)
        column.addWidget(self.views, 1)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(self.rates)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        split.setSizes([700, 260])
        split.setCollapsible(0, False)
        self.split = split
        self.rates.hide()  # until the gallery's width is known (resizeEvent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(2, 2, 2, 2)
        outer.addLayout(top)
        outer.addWidget(self.status)
        outer.addWidget(split, 1)

    # -- room -------------------------------------------------------------------------------------
    def show_rates(self, shown: bool) -> None:
        self.rates.setVisible(shown)
        self.rates_button.setChecked(shown)

    def _on_rates_clicked(self, checked: bool) -> None:
        self._rates_chosen = True
        self.show_rates(checked)

    def resizeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)  # type: ignore[arg-type]
        if not self._rates_chosen:
            self.show_rates(self.width() >= WIDE_PX)

    # -- model and coordinator --------------------------------------------------------------------
    def _on_model_changed(self) -> None:
        m = self.model
        self._fill(self.verdict, [("all verdicts", ALL), ("failed", "failed"), *[(v, v) for v in m.verdicts()]],
                   m.verdict_filter)
        numbered = [(f"{i}. {p[:40]}", p) for i, p in enumerate(m.prompts(), 1)]
        self._fill(self.prompt, [("all prompts", ALL), *numbered], m.prompt_filter)
        total = m.progress.get("total") or len(m.entries)
        if self.coordinator is None or self.coordinator.state == "idle":
            self.progress.setRange(0, max(int(total), 1))
            self.progress.setValue(min(int(m.progress.get("done") or len(m.entries)), max(int(total), 1)))
        if m.study_dir and (self.coordinator is None or self.coordinator.state == "idle"):
            self.status.setText(f"{Path(m.study_dir).name}: {m.status}, {m.stats.summary()}")
        self.resume_button.setEnabled(bool(m.study_dir) and m.status != "done")

    @staticmethod
    def _fill(combo: QComboBox, items: list[tuple[str, str]], current: str) -> None:
        if [combo.itemData(i) for i in range(combo.count())] != [value for _, value in items]:
            combo.clear()
            for text, value in items:
                combo.addItem(text, value)
        combo.setCurrentIndex(max(0, combo.findData(current)))  # the model's filter (reset by open_study)

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
        self.open_button.setEnabled(state == "idle" and not self.seeds_problem())

    # -- user actions -----------------------------------------------------------------------------
    def set_view(self, which: int | str) -> None:
        """"grid" (0) or "list" (1); sorting applies to the list only (its box shows with the list)."""
        i = VIEWS.index(which) if isinstance(which, str) else int(which)
        self.shape.setCurrentIndex(i)
        self.views.setCurrentIndex(i)
        self.sort.setVisible(VIEWS[i] == "list")

    def seeds_problem(self) -> str:
        """Why the seeds field cannot be swept ("" when it can), in the seed spec's own words."""
        try:
            parse_seeds(self.seeds.text().strip() or "0-9")
        except SeedSpecError as exc:
            return str(exc)
        return ""

    def _on_seeds(self) -> None:
        problem = self.seeds_problem()
        self.seeds.setStyleSheet("border: 1px solid #c62828" if problem else "")
        self.seeds.setToolTip(problem or SEEDS_TIP)
        self.open_button.setEnabled(not problem)
        self.open_button.setToolTip(f"Fix the seeds first: {problem}" if problem else OPEN_TIP)
        if self.coordinator is not None and not problem:
            self.coordinator.set_seeds(self.seeds.text().strip() or "0-9")

    def _choose_list(self) -> None:
        if self.seeds_problem():  # refused before a file is picked, not after
            self._on_seeds()
            return
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

    def _menu(self, view: QListView | QTableView, pos: QPoint) -> None:
        index = view.indexAt(pos)
        if not index.isValid() or index.data(RUN_DIR) is None:
            return
        menu = QMenu(self)
        for text, slot in self.menu_actions(str(index.data(RUN_DIR))):
            action = menu.addAction(text)
            action.setEnabled(slot is not None)
            if slot is not None:
                action.triggered.connect(slot)
        menu.popup(view.viewport().mapToGlobal(pos))


def raise_dock(widget: QWidget, height: int = 300) -> None:
    """Show the dock a widget sits in in front of its tabs, tall enough to read (the bottom docks start low)."""
    dock = widget.parentWidget()
    while dock is not None and not isinstance(dock, QDockWidget):
        dock = dock.parentWidget()
    if dock is None:
        return
    dock.show()
    dock.raise_()
    window = dock.parentWidget()
    if isinstance(window, QMainWindow) and not dock.isFloating() and dock.height() < height:
        window.resizeDocks([dock], [height], Qt.Orientation.Vertical)


def build_sweep_gallery(state: Any) -> SweepGallery:
    """The gallery with its model and coordinator, wired to the window's state: dropped prompt lists start
    sweeps (state.opener), a clicked thumbnail opens its run in the timeline (state.opener.open_run), a sweep
    study picked in the history shows here (state.controller.studies) and raises the gallery's dock."""
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
    # A sweep that starts (a dropped list, Resume) shows itself: the gallery comes forward, the status bar says so.
    coordinator.stateChanged.connect(lambda st: raise_dock(gallery, 380) if st == "waiting" else None)
    coordinator.sigMessage.connect(state.controller.sigMessage.emit)
    studies = getattr(state.controller, "studies", None)
    if studies is not None:
        studies.sweeps = coordinator
        studies.viewOpened.connect(lambda view: raise_dock(gallery, 380) if view == "sweep" else None)
    return gallery

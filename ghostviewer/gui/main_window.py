"""The main window: composes the docks and wires widgets to models and the controller — nothing else."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent, QShowEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QSplitter,
    QToolButton,
    QTreeWidget,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui import messages
from ghostviewer.gui.actions import build_menus, create_actions, gate_replay, navigation_actions, replay_menu
from ghostviewer.gui.app_settings import LAYOUT_VERSION
from ghostviewer.gui.app_state import AppState
from ghostviewer.gui.coordinators.folder_watch import install_folder_watch
from ghostviewer.gui.coordinators.isolate_action import IsolateAction
from ghostviewer.gui.coordinators.probe_coordinator import install_probe_action
from ghostviewer.gui.coordinators.reference_coordinator import install_reference_actions
from ghostviewer.gui.dialogs.about_dialog import show_about
from ghostviewer.gui.dialogs.bundle_export_dialog import show_export_dialog
from ghostviewer.gui.dialogs.welcome import show_welcome
from ghostviewer.gui.models.batch_model import BatchModel
from ghostviewer.gui.widgets.attention_view import AttentionView
from ghostviewer.gui.widgets.batch_strip import BatchStrip
from ghostviewer.gui.widgets.bisect_trail import build_bisect_trail
from ghostviewer.gui.widgets.block_tree import BlockTree
from ghostviewer.gui.widgets.call_inputs_panel import CallInputsPanel
from ghostviewer.gui.widgets.compare_view import build_compare_view, selected_runs
from ghostviewer.gui.widgets.embeddings_view import EmbeddingsView
from ghostviewer.gui.widgets.feature_map_view import FeatureMapView
from ghostviewer.gui.widgets.history_panel import HistoryPanel
from ghostviewer.gui.widgets.log_panel import LogPanel
from ghostviewer.gui.widgets.memory_label import MemoryLabel
from ghostviewer.gui.widgets.pipeline_panel import PipelinePanel
from ghostviewer.gui.widgets.prompt_panel import PromptPanel
from ghostviewer.gui.widgets.queue_panel import QueuePanel
from ghostviewer.gui.widgets.run_events import RunEventsView
from ghostviewer.gui.widgets.run_header import RunHeader
from ghostviewer.gui.widgets.stat_plot import StatPlot
from ghostviewer.gui.widgets.stats_heatmap import StatsHeatmap
from ghostviewer.gui.widgets.step_images import StepImages
from ghostviewer.gui.widgets.sweep_gallery import build_sweep_gallery
from ghostviewer.gui.widgets.timeline_bar import TimelineBar
from ghostviewer.gui.window_layout import (
    DEFAULT_SIZE,
    ScrollDock,
    default_dock_sizes,
    fit_to_screen,
    hide_stray_tab_bars,
    restore_geometry,
    save_layout,
)

STEP_IMAGES_MIN_PX = 200  # two rows of previews ~90 px each with their titles, whatever dock is raised
ENGINE_WORDS = {"stopped": "engine stopped — Engine ▸ Restart engine", "starting": "engine starting…",
                "refused": "engine refused: another protocol version (see the message)",
                "loading": "engine loading the pipeline…", "ready": "engine ready", "running": "engine running",
                "bisecting": messages.ENGINE_BUSY.format(doing="bisecting"),
                "sweeping": messages.ENGINE_BUSY.format(doing="sweeping"),
                "exporting": messages.ENGINE_BUSY.format(doing="exporting")}


class MainWindow(QMainWindow):
    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.setWindowTitle("GhostViewer")
        self.setAcceptDrops(True)
        self.setMinimumSize(1, 1)  # until shown: the docks stand side by side before they are tabified, and the
        self.resize(*DEFAULT_SIZE)  # layout's minimum of that would blow the window up (showEvent lifts it)
        s = state
        s.reporter.parent_widget = self
        self.default_areas: dict[QDockWidget, Qt.DockWidgetArea] = {}  # for View ▸ Reset layout
        # -- widgets --------------------------------------------------------------------------------
        self.pipeline_panel = PipelinePanel(s.pipeline)
        self.prompt_panel = PromptPanel(s.prompt, s.pipeline, s.blocks)
        self.queue_panel = QueuePanel(s.queue)
        self.history_panel = HistoryPanel(s.history)
        self.log_panel = LogPanel()
        self.run_header = RunHeader(s.timeline)
        self.batch = BatchModel(s.timeline)  # a batch run's samples and the one the image views describe
        self.step_images = StepImages(s.timeline, s.step_data, self.batch)
        self.call_inputs = CallInputsPanel(s.timeline)  # hidden for a text-to-image run
        self.batch_strip = BatchStrip(self.batch)  # hidden for a run of one image
        self.timeline_bar = TimelineBar(s.timeline)
        self.stat_plot = StatPlot(s.timeline, s.selection)
        self.block_tree = BlockTree(s.blocks)
        self.heatmap = StatsHeatmap(s.timeline, s.blocks)
        self.run_events = RunEventsView(s.timeline)
        self.bisect_trail = build_bisect_trail(s)
        # Views of docks behind others' tabs at start, built when their dock first shows or they are first asked
        # for (LAZY): ~40 % of the window's making, which a launch no longer waits for
        self._makers: dict[str, tuple[Callable[[], QWidget], ScrollDock | None]] = {
            "feature_maps": (lambda: FeatureMapView(s.timeline, s.blocks, s.step_data, self.batch), None),
            "attention": (lambda: AttentionView(s.timeline, s.blocks, s.step_data, self.batch), None),
            "embeddings": (lambda: EmbeddingsView(s.timeline), None),
            "compare_view": (lambda: build_compare_view(s), None)}
        self._made: dict[str, QWidget] = {}
        self._lazy_ready = False  # until the first show has tabified the docks, every dock reads as shown
        top = QWidget()
        column = QVBoxLayout(top)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(self.run_header)
        images = QHBoxLayout()
        images.setSpacing(2)
        images.addWidget(self.step_images, 1)
        images.addWidget(self.call_inputs)
        column.addLayout(images, 1)
        self.step_images.setMinimumHeight(STEP_IMAGES_MIN_PX)  # a raised bottom dock stops there
        column.addWidget(self.batch_strip)
        column.addWidget(self.timeline_bar)
        center = QSplitter(Qt.Orientation.Vertical)
        center.addWidget(top)
        center.addWidget(self.stat_plot)
        center.setSizes([420, 300])
        center.setChildrenCollapsible(False)
        self.setCentralWidget(center)
        self.docks = [
            self._dock("Pipeline", self.pipeline_panel, Qt.DockWidgetArea.LeftDockWidgetArea),
            self._dock("Prompt", self.prompt_panel, Qt.DockWidgetArea.LeftDockWidgetArea),
            self._dock("Run queue", self.queue_panel, Qt.DockWidgetArea.LeftDockWidgetArea),
            self._dock("Runs history", self.history_panel, Qt.DockWidgetArea.RightDockWidgetArea),
            self._dock("Log", self.log_panel, Qt.DockWidgetArea.BottomDockWidgetArea),
            self._dock("Blocks", self.block_tree, Qt.DockWidgetArea.RightDockWidgetArea),
            self._dock("Heat map", self.heatmap, Qt.DockWidgetArea.RightDockWidgetArea),
            self._lazy_dock("Feature maps", "feature_maps", Qt.DockWidgetArea.RightDockWidgetArea),
            self._lazy_dock("Attention", "attention", Qt.DockWidgetArea.RightDockWidgetArea),
            self._dock("Run events", self.run_events, Qt.DockWidgetArea.BottomDockWidgetArea),
            self._lazy_dock("Embeddings", "embeddings", Qt.DockWidgetArea.RightDockWidgetArea),
            self._dock("Sweep gallery", build_sweep_gallery(s), Qt.DockWidgetArea.BottomDockWidgetArea),
            self._lazy_dock("Compare", "compare_view", Qt.DockWidgetArea.BottomDockWidgetArea),
            self._dock("Bisection", self.bisect_trail, Qt.DockWidgetArea.BottomDockWidgetArea),
        ]
        self.setCorner(Qt.Corner.BottomLeftCorner, Qt.DockWidgetArea.LeftDockWidgetArea)  # side columns run
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)  # the full height
        default_dock_sizes(self)
        self.engine_label = QLabel(ENGINE_WORDS["starting"])
        self.memory_label = MemoryLabel(lambda: s.engine.pid)
        self.statusBar().addPermanentWidget(self.engine_label)
        self.statusBar().addPermanentWidget(self.memory_label)
        # -- actions and menus ----------------------------------------------------------------------
        a = self.actions = create_actions(self)
        top.addActions(navigation_actions(a))  # Space, arrows, Home, End: only in the timeline, images and plot
        self.stat_plot.plot.addActions(navigation_actions(a))
        self.heatmap.plot.addActions(navigation_actions(a))  # after a click in the heat map, too
        self.heatmap.plot.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.block_tree.tree.addActions([a.step_back, a.step_forward])  # Left/Right scrub; Up/Down walk blocks
        top.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.recent_menu = build_menus(self, a, self.docks)
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        c, t = s.controller, s.timeline
        a.open_folder.triggered.connect(self.pipeline_panel.choose_folder)
        a.open_file.triggered.connect(self.pipeline_panel.choose_file)
        a.use_demo.triggered.connect(lambda: s.pipeline.set_source("demo"))
        a.open_run.triggered.connect(self._choose_run)
        a.open_bundle.triggered.connect(self._choose_bundle)
        a.open_prompts.triggered.connect(self._choose_prompts)
        a.runs_folder.triggered.connect(self._choose_runs_folder)
        a.export_bundle.triggered.connect(lambda: show_export_dialog(self, s))
        a.quit.triggered.connect(self.close)
        a.run.triggered.connect(c.queue_run)
        a.replay.triggered.connect(lambda: c.replay())
        a.cancel.triggered.connect(c.cancel_current)
        a.decode.triggered.connect(lambda: c.decode_step(sample=self.batch.selected))
        a.play.triggered.connect(t.toggle_play)
        a.step_back.triggered.connect(lambda: t.step_by(-1))
        a.step_forward.triggered.connect(lambda: t.step_by(1))
        a.first_step.triggered.connect(t.go_first)
        a.last_step.triggered.connect(t.go_last)
        a.jump_anomaly.triggered.connect(self._jump_to_anomaly)
        a.replay_5.triggered.connect(lambda: c.replay(times=5))
        a.replay_20.triggered.connect(lambda: c.replay(times=20))
        a.compare_selected.triggered.connect(lambda: c.compare_selected(selected_runs(self.history_panel.tree)))
        a.compare_with.triggered.connect(lambda: self._bring_forward("Compare"))
        a.bisect.triggered.connect(lambda: c.bisect())
        a.restart_engine.triggered.connect(c.restart_engine)
        a.about.triggered.connect(lambda: show_about(self, s, a))
        a.welcome.triggered.connect(lambda: show_welcome(self))
        a.reset_layout.triggered.connect(self.reset_layout)
        # -- signals --------------------------------------------------------------------------------
        self.prompt_panel.runRequested.connect(c.queue_run)
        self.queue_panel.cancelRequested.connect(c.cancel)
        self.queue_panel.jobActivated.connect(self._open_job)
        self.history_panel.runSelected.connect(s.opener.open_run)
        self.history_panel.replayRequested.connect(c.replay)
        self.history_panel.replayTimesRequested.connect(lambda path, times: c.replay(path, times))
        self.history_panel.bisectRequested.connect(c.bisect)
        self.history_panel.compareRequested.connect(c.compare_runs)
        self.history_panel.exportRequested.connect(lambda path: s.opener.open_run(path) and show_export_dialog(self, s))
        self.history_panel.messageRequested.connect(lambda text: self.statusBar().showMessage(text, 15000))
        self.history_panel.replay_blocker = c.replay_blocker
        self.heatmap.jumpRequested.connect(self._jump_to_anomaly)
        self.isolate = IsolateAction(s, self, requests=self.block_tree.isolateRequested)
        self.reference = install_reference_actions(s, self, a)  # Run ▸ known-good model…, baseline file…
        self.probes, self.probe_report = install_probe_action(s, self, a)  # Run ▸ Probe the pipeline
        self.timeline_bar.decodeRequested.connect(lambda: c.decode_step(sample=self.batch.selected))
        s.step_data.stepLoaded.connect(self._on_step_data)
        self.timeline_bar.replayRequested.connect(lambda: c.replay())
        self.timeline_bar.replay.setMenu(replay_menu(self, a))
        self.timeline_bar.replay.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        self.history_panel.tree.setSelectionMode(QTreeWidget.SelectionMode.ExtendedSelection)
        self.history_panel.studySelected.connect(c.studies.open_study)
        self.folder_watch = install_folder_watch(self)  # File ▸ Watch folder…
        c.compare.opened.connect(lambda: self._bring_forward("Compare", 380))
        c.studies.viewOpened.connect(lambda view: self._bring_forward("Bisection") if view == "bisect" else None)
        c.bisects.stateChanged.connect(lambda state: self._bring_forward("Bisection") if state == "waiting" else None)
        c.sigReplayChecked.connect(self.timeline_bar.show_replay)
        for changed in (t.runChanged, t.stepsChanged, s.pipeline.changed):  # after the bar's own (it enables Replay)
            changed.connect(self._gate_replay)
        c.sigMessage.connect(lambda text: self.statusBar().showMessage(text, 10000))
        c.sigEngineState.connect(lambda state: self.engine_label.setText(ENGINE_WORDS.get(state, state)))
        s.reporter.sigReported.connect(lambda text: self.statusBar().showMessage(text, 15000))
        t.runChanged.connect(self._forget_anomaly_message)
        t.runChanged.connect(lambda: self.history_panel.show_current(t.run_dir))
        self._tabs_pending = True  # the default layout is made at the first show (then the saved one restored)
        self._saved_layout = restore_geometry(self, s.settings)
        self._default_layout: QByteArray | None = None  # captured at the first show, for Reset layout
        fit_to_screen(self)
        self._gate_replay()  # no run shown yet: Replay is off

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        first = self._tabs_pending
        self._tabify_default()
        self.setMinimumSize(0, 0)  # the layout's own minimum again (see __init__)
        if first:
            default_dock_sizes(self)  # at the size the window is shown at
            QTimer.singleShot(0, self, lambda: hide_stray_tab_bars(self))  # the bars of the groups built one by one
            self._default_layout = self.saveState(LAYOUT_VERSION)
            if self._saved_layout is not None:
                self.restoreState(self._saved_layout, LAYOUT_VERSION)  # refused when of another version
                hide_stray_tab_bars(self)
            QTimer.singleShot(0, self, self._make_shown_views)

    def reset_layout(self) -> None:
        """View ▸ Reset layout: every dock back in its first place, tab group and size (the layout captured
        at the first show: re-tabifying docks by hand leaves stray tab bars on screen)."""
        if self._default_layout is not None:
            self.restoreState(self._default_layout, LAYOUT_VERSION)
            hide_stray_tab_bars(self)
            QTimer.singleShot(0, self, lambda: hide_stray_tab_bars(self))  # and those the next layout pass leaves

    def _tabify_default(self) -> None:
        """The default tab groups, at the first show (a dock a saved layout does not know stays in them)."""
        if self._tabs_pending:  # tabified before the first show, Qt leaves a stray tab bar on screen
            self._tabs_pending = False
            self.tabifyDockWidget(self.docks[3], self.docks[5])  # runs history | blocks
            self.tabifyDockWidget(self.docks[6], self.docks[7])  # heat map | feature maps | attention
            self.tabifyDockWidget(self.docks[7], self.docks[8])
            self.tabifyDockWidget(self.docks[8], self.docks[10])  # attention | embeddings
            self.tabifyDockWidget(self.docks[4], self.docks[9])  # log | run events
            self.tabifyDockWidget(self.docks[9], self.docks[11])  # one bottom group: … | sweep gallery | …
            self.tabifyDockWidget(self.docks[11], self.docks[12])  # sweep gallery | compare | bisection
            self.tabifyDockWidget(self.docks[12], self.docks[13])
            self.docks[11].raise_()
            self.docks[4].raise_()
            self.docks[3].raise_()
            self.docks[6].raise_()

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> ScrollDock:
        dock = ScrollDock(title, self)
        dock.setObjectName(f"dock-{title.lower().replace(' ', '-')}")
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        self.default_areas[dock] = area
        return dock

    def _lazy_dock(self, title: str, name: str, area: Qt.DockWidgetArea) -> ScrollDock:
        """A dock whose view (self.<name>) is made when the dock first shows, or when it is first asked for."""
        dock = self._dock(title, QWidget(), area)
        self._makers[name] = (self._makers[name][0], dock)
        dock.visibilityChanged.connect(lambda shown: self._view(name) if shown and self._lazy_ready else None)
        return dock

    def _make_shown_views(self) -> None:
        """After the first show: the views of lazy docks left in front (a saved layout may raise one)."""
        self._lazy_ready = True
        for name, (_make, dock) in self._makers.items():
            if dock is not None and dock.isVisible() and not dock.visibleRegion().isEmpty():
                self._view(name)

    def _view(self, name: str) -> QWidget:
        view = self._made.get(name)
        if view is None:
            make, dock = self._makers[name]
            view = self._made[name] = make()
            if dock is not None:
                placeholder = QDockWidget.widget(dock)  # the scroll area of the empty stand-in
                dock.setWidget(view)
                view.show()  # a scroll area shows a widget given to it while it is on screen only when told
                if placeholder is not None:
                    placeholder.deleteLater()
        return view

    feature_maps = property(lambda self: self._view("feature_maps"))
    attention = property(lambda self: self._view("attention"))
    embeddings = property(lambda self: self._view("embeddings"))
    compare_view = property(lambda self: self._view("compare_view"))

    # -- small interactions -----------------------------------------------------------------------
    def _bring_forward(self, title: str, height: int = 300) -> None:
        """Show a dock in front of its tabs, tall enough to read (the bottom docks start low)."""
        dock = next(d for d in self.docks if d.windowTitle() == title)
        dock.show()
        dock.raise_()
        if not dock.isFloating() and dock.height() < height:
            self.resizeDocks([dock], [height], Qt.Orientation.Vertical)

    def _on_step_data(self, data: object) -> None:
        self.timeline_bar.set_step_data(data)
        self.actions.decode.setEnabled(self.timeline_bar.decode.isEnabled())
        self.actions.decode.setToolTip(self.timeline_bar.decode.toolTip())

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for source in self.state.pipeline.recent:
            label = "demo pipeline" if source == "demo" else source
            self.recent_menu.addAction(label, lambda source=source: self.state.pipeline.set_source(source))

    def _forget_anomaly_message(self) -> None:
        """The previous run's "First anomaly: …" must not stay in the status bar over another run."""
        if self.statusBar().currentMessage().startswith(messages.ANOMALY_PREFIX):
            self.statusBar().clearMessage()

    def _gate_replay(self, *_args: object) -> None:
        allowed, why = self.state.controller.replay_gate()
        gate_replay(self.actions, self.timeline_bar.replay, self.state.timeline.record is not None, allowed, why)

    def _open_job(self, job_id: int) -> None:
        job = self.state.queue.job(job_id)
        if job is not None and job.run_dir:
            self.state.opener.open_run(job.run_dir)

    def _choose_run(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a run folder", str(self.state.history.runs_dir))
        if folder:
            self.state.opener.open_run(folder)

    def _choose_bundle(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a bug report", "", "Bug reports (*.zip)")
        if path:
            self.state.opener.open_bundle(path)

    def _choose_prompts(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Queue a prompt list", "",
                                              "Prompt lists (*.txt *.csv *.jsonl *.json)")
        if path:
            self.state.opener.queue_prompt_list(path)

    def _choose_runs_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Runs folder", str(self.state.history.runs_dir))
        if folder:
            self.state.settings.set_runs_dir(Path(folder))
            self.state.history.set_runs_dir(Path(folder))
            self.statusBar().showMessage(messages.RUNS_DIR_CHANGED.format(path=folder), 10000)

    def _jump_to_anomaly(self) -> None:
        """Ctrl+J: the controller selects the step and module (tree, heat map, feature maps); the plot adds the
        module's curve when it has one (a denoising-loop module)."""
        if not self.state.controller.jump_to_first_anomaly():
            return
        anomaly = (self.state.timeline.record.first_anomaly if self.state.timeline.record else None) or {}
        if anomaly.get("phase") == "denoise" and anomaly.get("module"):
            self.state.selection.toggle(str(anomaly["module"]), True)

    # -- drag and drop, layout, closing -----------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt's name
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt's name
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.state.opener.open_path(url.toLocalFile())
        event.acceptProposedAction()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt's name
        save_layout(self, self.state.settings)
        self.state.save()
        self.state.step_data.shutdown()
        self.state.step_data_b.shutdown()
        self.state.history.shutdown()
        self.state.controller.shutdown()
        super().closeEvent(event)

"""The main window: composes the docks and wires widgets to models and the controller — nothing else."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent, QShowEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ghostviewer import __version__
from ghostviewer.gui import messages
from ghostviewer.gui.actions import build_menus, create_actions
from ghostviewer.gui.app_state import AppState
from ghostviewer.gui.widgets.attention_view import AttentionView
from ghostviewer.gui.widgets.block_tree import BlockTree
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
from ghostviewer.gui.widgets.timeline_bar import TimelineBar

ENGINE_WORDS = {"stopped": "engine stopped — Engine ▸ Restart engine", "starting": "engine starting…",
                "loading": "engine loading the pipeline…", "ready": "engine ready", "running": "engine running"}


class MainWindow(QMainWindow):
    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.setWindowTitle("GhostViewer")
        self.setAcceptDrops(True)
        self.resize(1400, 900)
        s = state
        s.reporter.parent_widget = self
        # -- widgets --------------------------------------------------------------------------------
        self.pipeline_panel = PipelinePanel(s.pipeline)
        self.prompt_panel = PromptPanel(s.prompt, s.pipeline)
        self.queue_panel = QueuePanel(s.queue)
        self.history_panel = HistoryPanel(s.history)
        self.log_panel = LogPanel()
        self.run_header = RunHeader(s.timeline)
        self.step_images = StepImages(s.timeline)
        self.timeline_bar = TimelineBar(s.timeline)
        self.stat_plot = StatPlot(s.timeline, s.selection)
        self.block_tree = BlockTree(s.blocks)
        self.heatmap = StatsHeatmap(s.timeline, s.blocks)
        self.feature_maps = FeatureMapView(s.timeline, s.blocks)
        self.attention = AttentionView(s.timeline, s.blocks)
        self.run_events = RunEventsView(s.timeline)
        self.embeddings = EmbeddingsView(s.timeline)
        top = QWidget()
        column = QVBoxLayout(top)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(self.run_header)
        column.addWidget(self.step_images, 1)
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
            self._dock("Feature maps", self.feature_maps, Qt.DockWidgetArea.RightDockWidgetArea),
            self._dock("Attention", self.attention, Qt.DockWidgetArea.RightDockWidgetArea),
            self._dock("Run events", self.run_events, Qt.DockWidgetArea.BottomDockWidgetArea),
            self._dock("Embeddings", self.embeddings, Qt.DockWidgetArea.RightDockWidgetArea),
        ]
        self.resizeDocks(self.docks[:3], [170, 330, 220], Qt.Orientation.Vertical)
        self.resizeDocks([self.docks[0], self.docks[3]], [320, 340], Qt.Orientation.Horizontal)
        self.resizeDocks([self.docks[4]], [110], Qt.Orientation.Vertical)
        self.engine_label = QLabel(ENGINE_WORDS["starting"])
        self.memory_label = MemoryLabel(lambda: s.engine.pid)
        self.statusBar().addPermanentWidget(self.engine_label)
        self.statusBar().addPermanentWidget(self.memory_label)
        # -- actions and menus ----------------------------------------------------------------------
        a = self.actions = create_actions(self)
        self.recent_menu = build_menus(self, a, self.docks)
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        c, t = s.controller, s.timeline
        a.open_folder.triggered.connect(self.pipeline_panel.choose_folder)
        a.open_file.triggered.connect(self.pipeline_panel.choose_file)
        a.use_demo.triggered.connect(lambda: s.pipeline.set_source("demo"))
        a.open_run.triggered.connect(self._choose_run)
        a.open_prompts.triggered.connect(self._choose_prompts)
        a.runs_folder.triggered.connect(self._choose_runs_folder)
        a.quit.triggered.connect(self.close)
        a.run.triggered.connect(c.queue_run)
        a.replay.triggered.connect(lambda: c.replay())
        a.cancel.triggered.connect(c.cancel_current)
        a.decode.triggered.connect(lambda: c.decode_step())
        a.play.triggered.connect(t.toggle_play)
        a.step_back.triggered.connect(lambda: t.step_by(-1))
        a.step_forward.triggered.connect(lambda: t.step_by(1))
        a.first_step.triggered.connect(lambda: t.set_step(0))
        a.last_step.triggered.connect(lambda: t.set_step(t.count - 1))
        a.jump_anomaly.triggered.connect(c.jump_to_first_anomaly)
        a.restart_engine.triggered.connect(c.restart_engine)
        a.about.triggered.connect(self._about)
        # -- signals --------------------------------------------------------------------------------
        self.prompt_panel.runRequested.connect(c.queue_run)
        self.queue_panel.cancelRequested.connect(c.cancel)
        self.queue_panel.jobActivated.connect(self._open_job)
        self.history_panel.runSelected.connect(s.opener.open_run)
        self.history_panel.replayRequested.connect(c.replay)
        self.heatmap.jumpRequested.connect(c.jump_to_first_anomaly)
        self.timeline_bar.decodeRequested.connect(lambda: c.decode_step())
        self.timeline_bar.replayRequested.connect(lambda: c.replay())
        c.sigReplayChecked.connect(self.timeline_bar.show_replay)
        c.sigMessage.connect(lambda text: self.statusBar().showMessage(text, 10000))
        c.sigEngineState.connect(lambda state: self.engine_label.setText(ENGINE_WORDS.get(state, state)))
        s.reporter.sigReported.connect(lambda text: self.statusBar().showMessage(text, 15000))
        t.runChanged.connect(self._forget_anomaly_message)
        self._tabs_pending = not self._restore_layout()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        if self._tabs_pending:  # tabified before the first show, Qt leaves a stray tab bar on screen
            self._tabs_pending = False
            self.tabifyDockWidget(self.docks[3], self.docks[5])  # runs history | blocks
            self.tabifyDockWidget(self.docks[6], self.docks[7])  # heat map | feature maps | attention
            self.tabifyDockWidget(self.docks[7], self.docks[8])
            self.tabifyDockWidget(self.docks[8], self.docks[10])  # attention | embeddings
            self.tabifyDockWidget(self.docks[4], self.docks[9])  # log | run events
            self.docks[4].raise_()
            self.docks[3].raise_()
            self.docks[6].raise_()

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock-{title.lower().replace(' ', '-')}")
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    # -- small interactions -----------------------------------------------------------------------
    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for source in self.state.pipeline.recent:
            label = "demo pipeline" if source == "demo" else source
            self.recent_menu.addAction(label, lambda source=source: self.state.pipeline.set_source(source))

    def _forget_anomaly_message(self) -> None:
        """The previous run's "First anomaly: …" must not stay in the status bar over another run."""
        if self.statusBar().currentMessage().startswith(messages.ANOMALY_PREFIX):
            self.statusBar().clearMessage()

    def _open_job(self, job_id: int) -> None:
        job = self.state.queue.job(job_id)
        if job is not None and job.run_dir:
            self.state.opener.open_run(job.run_dir)

    def _choose_run(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a run folder", str(self.state.history.runs_dir))
        if folder:
            self.state.opener.open_run(folder)

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

    def _about(self) -> None:
        QMessageBox.about(self, "About GhostViewer",
                          f"GhostViewer {__version__}\nA debugger for intermittent bugs in diffusion pipelines.")

    # -- drag and drop, layout, closing -----------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt's name
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt's name
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.state.opener.open_path(url.toLocalFile())
        event.acceptProposedAction()

    def _restore_layout(self) -> bool:
        """The remembered geometry and dock layout; False when there is none (the default layout then)."""
        geometry = self.state.settings.get_bytes("window/geometry")
        layout = self.state.settings.get_bytes("window/state")
        if geometry is not None:
            self.restoreGeometry(geometry)
        return layout is not None and bool(self.restoreState(layout))

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt's name
        self.state.settings.set_bytes("window/geometry", self.saveGeometry())
        self.state.settings.set_bytes("window/state", self.saveState())
        self.state.save()
        self.state.controller.shutdown()
        super().closeEvent(event)

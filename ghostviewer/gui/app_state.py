"""The composition root: settings, engine client, models and controller, built once per window."""

from __future__ import annotations

from dataclasses import dataclass, field

from ghostviewer.gui import messages
from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.controller import RunController
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter
from ghostviewer.gui.link.engine_client import EngineClient
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.pipeline_model import DEVICES, DTYPES, MAX_RECENT, PipelineModel
from ghostviewer.gui.models.prompt_model import PromptModel
from ghostviewer.gui.models.queue_model import QueueModel
from ghostviewer.gui.models.stat_selection import StatSelection
from ghostviewer.gui.models.step_data_model import StepDataModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.path_opener import PathOpener


@dataclass
class AppState:
    settings: AppSettings
    engine: EngineClient
    pipeline: PipelineModel
    prompt: PromptModel
    queue: QueueModel
    timeline: TimelineModel
    history: HistoryModel
    selection: StatSelection
    reporter: ErrorReporter
    controller: RunController
    opener: PathOpener
    blocks: BlockModel
    step_data: StepDataModel = field(default_factory=StepDataModel)  # the shown run's step, read once
    step_data_b: StepDataModel = field(default_factory=StepDataModel)  # the "B" run of a comparison

    def restore(self) -> None:
        """Remembered prompt fields, recent pipelines, device, dtype and plot choices (not the source: the
        window opens on the demo pipeline, or on the PATH it was given; never the ghost: a launch starts clean)."""
        s = self.settings
        self.prompt.load_dict(s.get_json("prompt", {}))
        recent = [r for r in s.get_json("recent_pipelines", []) if isinstance(r, str)][:MAX_RECENT]
        self.pipeline.recent = recent or ["demo"]
        device, dtype = s.get_json("device", "auto"), s.get_json("dtype", "")
        self.pipeline.device = device if device in DEVICES else "auto"
        self.pipeline.dtype = dtype if dtype in DTYPES else ""
        self.selection.set_stat(s.get_json("plot_stat", "absmax"))
        self.pipeline.changed.emit()

    def save(self) -> None:
        s = self.settings
        s.set_json("prompt", self.prompt.to_dict())
        s.set_json("recent_pipelines", self.pipeline.recent)
        s.set_json("device", self.pipeline.device)
        s.set_json("dtype", self.pipeline.dtype)
        s.set_json("plot_stat", self.selection.stat)
        s.sync()


def build_state(settings: AppSettings | None = None, engine: EngineClient | None = None,
                dialogs: bool = True) -> AppState:
    settings = settings or AppSettings()
    engine = engine or EngineClient()
    pipeline, prompt, queue = PipelineModel(), PromptModel(), QueueModel()
    timeline, history, selection = TimelineModel(), HistoryModel(settings.runs_dir()), StatSelection()
    reporter = ErrorReporter(dialogs=dialogs)
    blocks = BlockModel()
    controller = RunController(engine, pipeline, prompt, queue, timeline, history, reporter, blocks)
    state = AppState(settings, engine, pipeline, prompt, queue, timeline, history, selection, reporter,
                     controller, PathOpener(controller), blocks, step_data=StepDataModel(timeline))
    controller.compare.attach_step_data(state.step_data, state.step_data_b)  # B follows the comparison's B
    state.restore()
    engine.sigReady.connect(lambda info: pipeline.set_devices(info.get("devices")))
    reporter.offer(messages.ENGINE_DIED, "Restart engine", controller.restart_engine)
    return state

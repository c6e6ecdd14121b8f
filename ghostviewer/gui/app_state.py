"""The composition root: settings, engine client, models and controller, built once per window."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

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

log = logging.getLogger("ghostviewer.gui")


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
    _at_start: dict[str, Any] = field(default_factory=dict)  # remembered() as restored

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
        self._at_start = self.remembered()  # save() writes only what changes from here

    def remembered(self) -> dict[str, Any]:
        """What this window would remember now, by settings key."""
        return {"prompt": self.prompt.to_dict(), "recent_pipelines": list(self.pipeline.recent),
                "device": self.pipeline.device, "dtype": self.pipeline.dtype, "plot_stat": self.selection.stat}

    def save(self) -> None:
        """Write what this window changed since it opened — and only that: two windows open on one settings file
        keep each other's changes (the last to quit no longer overwrites every key). Recent pipelines are
        merged, this window's first. A key both windows changed gets this window's value, said in the log."""
        s = self.settings
        s.sync()  # what another window wrote meanwhile
        for key, value in self.remembered().items():
            start = self._at_start.get(key)
            on_disk = s.get_json(key, value) if s.qsettings.contains(key) else None
            if key == "recent_pipelines":
                theirs = [r for r in (on_disk or []) if isinstance(r, str)]
                value = list(dict.fromkeys([*value, *theirs]))[:MAX_RECENT]
            elif value == start:
                continue  # unchanged here: whatever is on disk (another window's choice) stays
            elif on_disk is not None and on_disk != start and on_disk != value:
                log.info("settings: %s was changed in another GhostViewer window too; this window's is kept", key)
            s.set_json(key, value)
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

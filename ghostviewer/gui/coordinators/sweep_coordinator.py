"""Sweeps from the window: a dropped prompt list (× the gallery's seeds) becomes one `sweep` command to the engine
process; its progress events fill the gallery's model as the runs land; cancel and resume work like a run's.

It talks to the engine client directly and never starts while the engine is busy with a run or a load: the
sweep waits (state "waiting") until the scheduler reports the engine ready. The list is checked here first,
streamed, so a malformed one is reported (with its line) before anything is sent.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ghostviewer.gui import messages
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter, one_line
from ghostviewer.gui.models.prompt_model import guidance_setting
from ghostviewer.gui.models.sweep_model import SweepModel
from ghostviewer.record import RecordError, StudyRecord
from ghostviewer.spec.prompt_lists import ListOptions, OutsideFilesError, PromptListError, count_prompt_list
from ghostviewer.spec.seeds import SeedSpecError, parse_seeds

log = logging.getLogger("ghostviewer.gui")
REFRESH_MS = 250  # the gallery re-reads the study at most this often while runs land
MESSAGES = {
    "list": "Could not read the prompt list {path}: {message}",
    "seeds": "Bad seeds: {message}",
    "queued": "Sweep of {name} ({count} runs) waits for the engine…",
    "started": "Sweep of {name}: {count} runs.",
    "finished": "Sweep done: {summary}.",
    "failed": "The sweep stopped: {message}",
    "busy": "A sweep is already running; cancel it first.",
    "not_sweep": "Could not resume {path}: {message}",
    "not_shown": "Could not show the sweep {path}: {message}",
    "shows_running": "The gallery follows the running sweep; cancel it (or wait) to look at {name}.",
}


class SweepCoordinator(QObject):
    sigMessage = Signal(str)
    stateChanged = Signal(str)  # idle | waiting | running
    progressed = Signal(dict)  # the engine's sweep_progress event (done, total, rate, eta, run_dir, verdict)
    ended = Signal(str)  # done | cancelled | failed

    def __init__(self, engine: Any, controller: Any, prompt: Any, pipeline: Any, blocks: Any, history: Any,
                 reporter: ErrorReporter, model: SweepModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine, self.controller, self.prompt, self.pipeline = engine, controller, prompt, pipeline
        self.blocks, self.history, self.reporter, self.model = blocks, history, reporter, model
        self.state = "idle"
        self.seeds = "0-9"
        self.ray = False  # sweeps go to Ray actors (a running cluster, else a local one)
        self._pending: dict[str, Any] | None = None
        self._asked: tuple[Path, str] | None = None  # (list, seeds) whose outside files the user is asked about
        reporter.offer(messages.SWEEP_LIST_OUTSIDE, messages.SWEEP_OUTSIDE, self._start_asked)
        self._ident: int | None = None
        self._timer = QTimer(self, singleShot=True, interval=REFRESH_MS)
        self._timer.timeout.connect(model.refresh)
        engine.sigEvent.connect(self._on_event)
        controller.sigEngineState.connect(lambda _state: self._send_pending())
        if hasattr(controller, "set_engine_busy"):  # the RunController: the engine state says "sweeping"
            self.stateChanged.connect(lambda state: controller.set_engine_busy("sweep", state == "running"))
        engine.sigEngineDied.connect(lambda why: self._on_end({"id": self._ident}, f"the engine process {why}"))

    # -- starting ---------------------------------------------------------------------------------
    def set_seeds(self, spec: str) -> None:
        self.seeds = spec

    def set_ray(self, on: bool) -> None:
        self.ray = bool(on)

    def start(self, list_path: str | Path, seeds: str | None = None, outside_files: bool = False) -> bool:
        """Sweep a prompt list × seeds (the gallery's field by default); False when the list or seeds are bad, or
        when it names files outside its folder and the user has not said yet to read them (asked)."""
        seeds = self.seeds if seeds is None else seeds
        try:
            prompts = count_prompt_list(list_path, ListOptions(outside_files=outside_files))
            if prompts == 0:
                raise PromptListError("it holds no prompts (only blank lines or # comments)")
            count = prompts * len(parse_seeds(seeds))
        except OutsideFilesError as exc:
            self._asked = (Path(list_path), seeds)
            self.reporter.report(messages.SWEEP_LIST_OUTSIDE.format(name=Path(list_path).name, file=exc.file))
            return False
        except PromptListError as exc:
            self.reporter.report(MESSAGES["list"].format(path=list_path, message=exc))
            return False
        except SeedSpecError as exc:
            self.reporter.report(MESSAGES["seeds"].format(message=exc))
            return False
        command = {"list": str(Path(list_path).resolve()), "seeds": seeds, "settings": self._settings()}
        if outside_files:
            command["outside_files"] = True
        return self._submit(command, Path(list_path).name, count)

    def _start_asked(self) -> None:
        asked, self._asked = self._asked, None
        if asked is not None:
            self.start(asked[0], asked[1], outside_files=True)

    def show_study(self, study_dir: str | Path | StudyRecord) -> bool:
        """A sweep study picked in the history, shown in the gallery (also one still running elsewhere, or
        interrupted: Resume goes on with it). Refused while this window's own sweep runs: the gallery follows
        that one. `study_dir` may be the study opened already (the study opener's: not opened twice)."""
        record = study_dir if isinstance(study_dir, StudyRecord) else None
        study_dir = record.path if record is not None else study_dir
        if self.state != "idle":
            shown = self.model.study_dir
            same = shown is not None and Path(shown).resolve() == Path(study_dir).resolve()
            if not same:
                self.sigMessage.emit(MESSAGES["shows_running"].format(name=Path(study_dir).name))
            return same
        try:
            self.model.open_study(study_dir if record is None else record)
        except RecordError as exc:
            self.reporter.note(MESSAGES["not_shown"].format(path=study_dir, message=one_line(exc)))
            return False
        return True

    def resume(self, study_dir: str | Path) -> bool:
        try:
            self.model.open_study(study_dir)
        except RecordError as exc:
            self.reporter.note(MESSAGES["not_sweep"].format(path=study_dir, message=one_line(exc)))
            return False
        return self._submit({"study_dir": str(study_dir)}, Path(study_dir).name,
                            int(self.model.progress.get("total") or 0))

    def _settings(self) -> dict[str, Any]:
        p = self.prompt
        source, device, dtype = self.pipeline.key()
        return {"negative_prompt": p.negative, "steps": int(p.steps), "guidance": guidance_setting(p.guidance),
                "scheduler": p.scheduler or None, "faults": [p.fault] if p.fault else [],
                "bypass": list(self.blocks.run_fields().get("bypass") or []), "source": source,
                "device": device, "dtype": dtype or None}

    def _submit(self, command: dict[str, Any], name: str, count: int) -> bool:
        if self.state != "idle":
            self.reporter.report(MESSAGES["busy"])
            return False
        self._pending = {**command, "runs_dir": str(self.history.runs_dir), "_name": name, "_count": count,
                         **({"ray": "auto"} if self.ray else {})}
        self._set_state("waiting")
        if not self._send_pending():
            self.sigMessage.emit(MESSAGES["queued"].format(name=name, count=count))
        return True

    def _send_pending(self) -> bool:
        if self._pending is None or self.controller.engine_state != "ready":
            return False
        pending, self._pending = self._pending, None
        name, count = pending.pop("_name"), pending.pop("_count")
        self._ident = self.engine.send("sweep", **pending)
        self._set_state("running")
        self.sigMessage.emit(MESSAGES["started"].format(name=name, count=count))
        return True

    def cancel(self) -> None:
        if self._pending is not None:
            self._pending = None
            self._set_state("idle")
            self.ended.emit("cancelled")
        elif self._ident is not None:
            self.engine.send("cancel", run=self._ident)

    # -- engine events ----------------------------------------------------------------------------
    def _on_event(self, event: dict[str, Any]) -> None:
        name = event.get("event")
        if name == "sweep_started":
            self._on_started(event)
        elif name == "sweep_progress":
            self._on_progress(event)
        elif name == "sweep_finished":
            self._on_end(event, None)
        elif name == "sweep_failed":
            self._on_end(event, str(event.get("error") or "unknown error"))

    def _mine(self, event: dict[str, Any]) -> bool:
        return self._ident is not None and event.get("id") == self._ident

    def _on_started(self, event: dict[str, Any]) -> None:
        if self._mine(event):
            try:
                self.model.open_study(str(event["study_dir"]))
            except (RecordError, KeyError) as exc:
                log.warning("cannot show the sweep study yet: %s", exc)

    def _on_progress(self, event: dict[str, Any]) -> None:
        if not self._mine(event):
            return
        if self.model.study_dir is None and event.get("study_dir"):
            self._on_started(event)
        self.progressed.emit(event)
        if not self._timer.isActive():
            self._timer.start()

    def _on_end(self, event: dict[str, Any], error: str | None) -> None:
        if not self._mine(event):
            return
        self._ident = None
        self._timer.stop()
        self.model.refresh()
        self.history.refresh()
        self._set_state("idle")
        if error is not None:
            self.reporter.report(MESSAGES["failed"].format(message=error))
            self.ended.emit("failed")
            return
        self.sigMessage.emit(MESSAGES["finished"].format(summary=event.get("summary", "")))
        self.ended.emit(str(event.get("status") or "done"))

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.stateChanged.emit(state)

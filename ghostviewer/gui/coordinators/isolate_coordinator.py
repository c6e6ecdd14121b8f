"""Isolating a module: the engine re-runs the run up to the module, captures its real inputs, writes a standalone
repro and fuzzes it (its `isolate` command). This coordinator sends the command and follows it to `isolated`, an
`error`, or the engine process dying; the action in the Blocks tree (isolate_action.py) asks where and shows the
fuzz table."""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui import messages
from ghostviewer.gui.link.engine_client import EngineClient

log = logging.getLogger("ghostviewer.gui")


class IsolateCoordinator(QObject):
    sigMessage = Signal(str)  # a line for the status bar
    isolated = Signal(dict)  # the engine's `isolated` event: the module, its repro and the fuzz table

    def __init__(self, engine: EngineClient, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        self.pending: dict[int, str] = {}  # command id -> module
        engine.sigEvent.connect(self._on_event)
        engine.sigEngineDied.connect(self._on_engine_died)

    def isolate(self, run_dir: str, module: str, step: int | None, folder: str) -> int:
        """Have the engine isolate `module` of the run at `step` (None: the first anomaly's) into `folder`;
        the command's id, or -1 (said) when there is no engine to send it to."""
        ident = self.engine.send("isolate", run_dir=run_dir, module=module, step=step, out=folder, fuzz=True)
        if ident < 0:
            self._say(messages.ISOLATE_FAILED.format(module=module, message=messages.ISOLATE_NO_ENGINE))
            return -1
        self.pending[ident] = module
        self._say(messages.ISOLATE_STARTED.format(module=module, folder=folder))
        return ident

    def _on_event(self, event: dict[str, Any]) -> None:
        name = event.get("event")
        module = self.pending.pop(event.get("id"), None) if name in ("isolated", "error") else None  # type: ignore[arg-type]
        if module is None:
            return
        if name == "error":
            self._say(messages.ISOLATE_FAILED.format(module=module, message=event.get("message")))
            return
        fuzz = event.get("fuzz") or {"broken": 0, "total": 0}
        missing = f" Note: {event['missing_user_code']}." if event.get("missing_user_code") else ""
        self._say(messages.ISOLATE_DONE.format(module=module, broken=fuzz["broken"], total=fuzz["total"],
                                               folder=event.get("out_dir")) + missing)
        self.isolated.emit(event)

    def _on_engine_died(self, _reason: str) -> None:
        for module in self.pending.values():
            self._say(messages.ISOLATE_FAILED.format(module=module, message=messages.ENGINE_GONE))
        self.pending.clear()

    def _say(self, text: str) -> None:
        log.info(text)
        self.sigMessage.emit(text)

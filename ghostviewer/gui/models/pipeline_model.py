"""Which pipeline the user wants (source, device, dtype), what the engine has loaded, and recent sources.

Loading is a transaction: a source enters Recent only once it has loaded, and a failed load puts the wanted
pipeline back to the last one that loaded (the engine loads it again), leaving the failure as one line with its
full text behind "Show details" — never a pipeline the window cannot run, retried at every Run."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

DEVICES = ("auto", "cpu", "cuda", "mps")  # every device a run may name
DTYPES = ("", "float32", "float16", "bfloat16")  # "": the pipeline's own
MAX_RECENT = 8


class PipelineModel(QObject):
    changed = Signal()  # anything shown changed
    wanted = Signal()  # source, device or dtype changed: the engine should (re)load

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.source = "demo"
        self.device = "auto"
        self.dtype = ""
        self.recent: list[str] = []
        self.devices: list[str] = list(DEVICES)  # what the Device choice offers (the engine says what exists)
        self.status = "waiting"  # waiting (engine starting) | loading | loaded | failed
        self.error = ""
        self.info: dict[str, Any] = {}
        self.schedulers: list[str] = []
        self.faults: list[dict[str, Any]] = []
        self.loaded_key: tuple[str, str, str] | None = None  # the last (source, device, dtype) that loaded
        self.failure = ""  # the last failed load's full message ("" once the user asks for something else)
        self.failed_source = ""

    # -- what the user asks for -------------------------------------------------------------------
    def set_source(self, source: str) -> None:
        source = str(source)
        self.failure = self.failed_source = ""
        if source != self.source:
            self.source = source
            self.wanted.emit()
        self.changed.emit()

    def set_device(self, device: str) -> None:
        if device in DEVICES and device != self.device:
            self.failure = self.failed_source = ""
            self.device = device
            self.wanted.emit()
            self.changed.emit()

    def set_dtype(self, dtype: str) -> None:
        if dtype in DTYPES and dtype != self.dtype:
            self.failure = self.failed_source = ""
            self.dtype = dtype
            self.wanted.emit()
            self.changed.emit()

    def load_failed(self, key: tuple[str, str, str], message: str) -> None:
        """The engine could not load `key`: it leaves Recent, and the wanted pipeline goes back to the last one
        that loaded (asked for again: `wanted`); with none, this one stays, failed."""
        self.failure, self.failed_source = message, key[0]
        self.recent = [s for s in self.recent if s != key[0]] or ["demo"]
        if self.loaded_key is not None and self.loaded_key != key and key == self.key():
            self.source, self.device, self.dtype = self.loaded_key
            self.status, self.error = "waiting", ""
            self.changed.emit()
            self.wanted.emit()
            return
        if key == self.key():
            self.status, self.error = "failed", message
        self.changed.emit()

    def set_devices(self, found: list[str] | None) -> None:
        """The devices the engine found (its `ready` event); the choice offers auto, those, and nothing else.
        A remembered device that does not exist here falls back to auto. None (an engine that does not say):
        everything stays offered."""
        if found is None:
            return
        self.devices = ["auto", *[d for d in DEVICES[1:] if d in found]]
        if self.device not in self.devices:
            self.device = "auto"
            self.wanted.emit()
        self.changed.emit()

    def key(self) -> tuple[str, str, str]:
        return (self.source, self.device, self.dtype)

    # -- what the engine reports ------------------------------------------------------------------
    def set_status(self, status: str, error: str = "", info: dict[str, Any] | None = None) -> None:
        self.status, self.error = status, error
        if info is not None:
            self.info = dict(info)
        if status == "loaded":
            self.loaded_key = self.key()
            self.recent = [self.source, *[s for s in self.recent if s != self.source]][:MAX_RECENT]
        self.changed.emit()

    def set_engine_info(self, schedulers: list[str], faults: list[dict[str, Any]]) -> None:
        self.schedulers, self.faults = list(schedulers), list(faults)
        self.changed.emit()

    def describe(self) -> str:
        """One line for the panel and the status bar."""
        name = "demo pipeline" if self.source == "demo" else self.source
        if self.status == "loaded":
            dtypes = sorted(set(self.info.get("dtypes", {}).values())) or ["?"]
            return f"{name}: {self.info.get('pipeline', '?')} on {self.info.get('device', '?')} ({'/'.join(dtypes)})"
        if self.status == "failed":
            return f"{name}: not loaded"
        return f"{name}: {'loading…' if self.status == 'loading' else 'waiting for the engine…'}"

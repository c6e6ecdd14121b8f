"""The GUI's end of the pipe to the engine process: a QProcess, JSON lines both ways, events as Qt signals.

No torch here: the engine process (ghostviewer.engine.server) owns it. If that process dies — segfault, OOM
kill, `kill -9` — `sigEngineDied` says why and `restart()` brings a fresh one. An engine whose `ready` announces
another PROTOCOL_VERSION than this window's (an install of mixed versions) is refused: stopped, sent nothing,
and `sigRefused` carries the line that says so (messages.ENGINE_PROTOCOL).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections import deque
from functools import partial
from typing import Any

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal

from ghostviewer.gui import messages

log = logging.getLogger("ghostviewer.engine")

ENGINE_MODULE = "ghostviewer.engine.server"
FROZEN_ENGINE_FLAG = "--engine-server"  # = ghostviewer.cli.ENGINE_SERVER_FLAG (not imported: the CLI is heavier)
STOP_TIMEOUT_MS = 3000
PROTOCOL_VERSION = 1  # the pipe's version this window speaks: = ghostviewer.engine.server.PROTOCOL_VERSION (a test)


def describe_exit(exit_code: int, status: QProcess.ExitStatus) -> str:
    if status == QProcess.ExitStatus.CrashExit:
        try:
            return f"killed by {signal.Signals(exit_code).name}"  # Qt reports the signal number on Unix
        except ValueError:
            return "crashed"
    return f"exited with status {exit_code}"


class EngineClient(QObject):
    sigStateChanged = Signal(str)  # stopped | starting | ready | refused (another protocol version)
    sigReady = Signal(dict)
    sigLoaded = Signal(dict)
    sigStarted = Signal(dict)
    sigStep = Signal(dict)
    sigFinished = Signal(dict)
    sigCancelled = Signal(dict)
    sigFailed = Signal(dict)
    sigDecoded = Signal(dict)
    sigBlocks = Signal(dict)
    sigError = Signal(dict)  # {"message": one line, "cmd": ..., "id": ...}
    sigEngineDied = Signal(str)  # why, in words
    sigLog = Signal(str)  # a line the engine wrote on stderr
    sigEvent = Signal(dict)  # every event, including those without a signal of their own ('isolated', …)
    sigRefused = Signal(str)  # the engine speaks another protocol version: the line that says so

    def __init__(self, parent: QObject | None = None, program: str | None = None,
                 arguments: list[str] | None = None) -> None:
        super().__init__(parent)
        self.program = program or sys.executable
        frozen = getattr(sys, "frozen", False)  # a packaged app: sys.executable is the app, not a Python
        default = [FROZEN_ENGINE_FLAG] if frozen else ["-m", ENGINE_MODULE]
        self.arguments = arguments if arguments is not None else default
        self.state = "stopped"
        self.info: dict[str, Any] = {}  # the 'ready' event
        self.refused = ""  # why the engine process was refused ("" when it was not)
        self._process: QProcess | None = None
        self._stopping = False
        self._out = bytearray()
        self._err = bytearray()
        self._stderr_tail: deque[str] = deque(maxlen=12)
        self._next_id = 0
        self._pending: list[bytes] = []  # commands written before the process started
        self._signals = {
            "ready": self.sigReady, "loaded": self.sigLoaded, "started": self.sigStarted, "step": self.sigStep,
            "finished": self.sigFinished, "cancelled": self.sigCancelled, "failed": self.sigFailed,
            "decoded": self.sigDecoded, "blocks": self.sigBlocks, "error": self.sigError,
        }

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._process is not None and self._process.state() != QProcess.ProcessState.NotRunning

    @property
    def pid(self) -> int | None:
        if not self.running:
            return None
        assert self._process is not None
        return int(self._process.processId()) or None

    def start(self) -> None:
        if self.running:
            return
        process = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        for key, value in (("PYTHONUNBUFFERED", "1"), ("HF_HUB_OFFLINE", "1"),
                           ("TRANSFORMERS_VERBOSITY", "error"), ("DIFFUSERS_VERBOSITY", "error")):
            if not env.contains(key):
                env.insert(key, value)
        process.setProcessEnvironment(env)
        process.setProgram(self.program)
        process.setArguments(self.arguments)
        process.readyReadStandardOutput.connect(partial(self._on_stdout, process))
        process.readyReadStandardError.connect(partial(self._on_stderr, process))
        process.started.connect(partial(self._on_started, process))
        process.finished.connect(partial(self._on_finished, process))
        process.errorOccurred.connect(partial(self._on_error, process))
        self._process, self._stopping, self.refused = process, False, ""
        self._out.clear()
        self._err.clear()
        self._stderr_tail.clear()
        self._set_state("starting")
        log.info("starting the engine process")
        process.start()

    def stop(self, timeout_ms: int = STOP_TIMEOUT_MS) -> None:
        """Ask the engine to quit (cancelling a running run); kill it if it does not within the timeout."""
        process = self._process
        if process is None:
            return
        self._stopping = True
        if self.running:
            self.send("quit")
            if not process.waitForFinished(timeout_ms):
                process.kill()
                process.waitForFinished(timeout_ms)
        self._forget(process)

    def restart(self) -> None:
        self.stop(timeout_ms=1000)
        self.start()

    def _forget(self, process: QProcess) -> None:
        if self._process is process:
            self._process = None
            self._pending.clear()
            self._set_state("refused" if self.refused else "stopped")
        process.deleteLater()

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.sigStateChanged.emit(state)

    # -- commands ---------------------------------------------------------------------------------
    def send(self, cmd: str, **fields: Any) -> int:
        """Write one command; returns the id its events will carry (-1 when no engine is running)."""
        if self._process is None or self.refused:
            log.warning("no engine process to send %r to%s", cmd, " (it was refused)" if self.refused else "")
            return -1
        self._next_id += 1
        line = (json.dumps({"cmd": cmd, "id": self._next_id, **fields}) + "\n").encode("utf-8")
        if self._process.state() == QProcess.ProcessState.Running:
            self._process.write(line)
        else:
            self._pending.append(line)
        return self._next_id

    def _on_started(self, process: QProcess) -> None:
        if process is not self._process:
            return
        for line in self._pending:
            process.write(line)
        self._pending.clear()

    # -- events -----------------------------------------------------------------------------------
    def _on_stdout(self, process: QProcess) -> None:
        if process is not self._process:
            return
        self._out += bytes(process.readAllStandardOutput().data())
        *lines, rest = self._out.split(b"\n")
        self._out = bytearray(rest)
        for raw in lines:
            self._dispatch(raw)

    def _dispatch(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return
        try:
            event = json.loads(text)
        except ValueError:
            log.warning("engine: %s", text)
            return
        name = event.get("event") if isinstance(event, dict) else None
        if self.refused:
            return  # nothing a refused engine says is acted on
        if name == "ready" and event.get("protocol") != PROTOCOL_VERSION:
            self._refuse(event.get("protocol"))
            return
        if name == "ready":
            self.info = event
            self._set_state("ready")
        if name == "error":
            log.error("engine error (%s): %s", event.get("cmd"), event.get("message"))
        target = self._signals.get(str(name))
        if target is not None:
            target.emit(event)
        if isinstance(event, dict):
            self.sigEvent.emit(event)

    def _refuse(self, theirs: Any) -> None:
        """The engine speaks another protocol: say so once, send it nothing, and stop it (quit, which every
        version understands, then killed if it lingers)."""
        self.refused = messages.ENGINE_PROTOCOL.format(theirs=theirs, ours=PROTOCOL_VERSION)
        log.error("refusing the engine process (pid %s): it announced protocol %r, this window speaks %d",
                  self.pid, theirs, PROTOCOL_VERSION)
        process = self._process
        if process is not None:
            self._stopping = True
            self._pending.clear()
            process.write(b'{"cmd": "quit"}\n')
            QTimer.singleShot(STOP_TIMEOUT_MS, process, process.kill)  # a no-op once it ended
        self.sigRefused.emit(self.refused)

    def _on_stderr(self, process: QProcess) -> None:
        if process is not self._process:
            return
        self._err += bytes(process.readAllStandardError().data())
        *lines, rest = self._err.split(b"\n")
        self._err = bytearray(rest)
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._stderr_tail.append(line)
                log.info("engine: %s", line)
                self.sigLog.emit(line)

    def _on_finished(self, process: QProcess, exit_code: int, status: QProcess.ExitStatus) -> None:
        if process is not self._process:
            return
        self._on_stdout(process)  # events written just before the end
        if self._out:
            self._dispatch(bytes(self._out))
        stopping = self._stopping
        self._forget(process)
        if not stopping:
            why = describe_exit(exit_code, status)
            last = self._stderr_tail[-1] if self._stderr_tail else ""
            log.error("the engine process ended (%s); its last words: %s", why, last or "none")
            self.sigEngineDied.emit(why)

    def _on_error(self, process: QProcess, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and process is self._process:
            why = f"could not start {self.program} ({process.errorString()})"
            self._forget(process)
            if not self._stopping:
                self.sigEngineDied.emit(why)

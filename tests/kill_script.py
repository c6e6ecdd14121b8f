"""scripts/kill_test.py loaded as a module, for the suite's short kill tests (the script is not a package).

`kill_test(forked_engines=True)`: each engine the script starts is a fork of this process running the engine
server's `main()` on its own pipes, instead of a fresh `python -m ghostviewer.engine.server`. It is still a
separate process, spoken to over the same JSON-lines pipes, SIGKILLed and reaped the same way, writing its run
through the same recorder; what it skips is importing torch and diffusers again (~7 of its ~8 CPU-s), which the
test process has done already. The kills through the window (tests/gui/live/test_gui_kill.py), test_job_scheduler
and tests/engine/test_kill_mid_run.py kill freshly started processes."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "kill_test.py"


def kill_test(forked_engines: bool = False) -> ModuleType:
    spec = importlib.util.spec_from_file_location("kill_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if forked_engines:
        module.Engine = _forked_engine_class(module.Engine)
    return module


class ForkedProcess:
    """The Popen surface the script uses (pid, stdin, stdout, send_signal, wait) for a forked child."""

    def __init__(self, pid: int, stdin: IO[str], stdout: IO[str]) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                self.stdin.close()
            elif deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            else:
                time.sleep(0.005)
        return self.returncode


def fork_engine(env: dict[str, str]) -> ForkedProcess:
    """A child of this process serving the engine protocol on fresh pipes (stderr to /dev/null), as
    `python -m ghostviewer.engine.server` run in ROOT with `env` would."""
    import ghostviewer.engine.loading.pipelines  # noqa: F401 - what the engine's boot imports, loaded before the fork
    import ghostviewer.engine.run.runner  # noqa: F401
    from ghostviewer.engine import server

    command_r, command_w = os.pipe()
    event_r, event_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    # Python 3.12+ warns when a process with threads forks: the child runs the engine's code only, never the
    # test's threads' (pytest-xdist's, Qt's)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns into the test process
        code = 1
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(command_r, 0)
            os.dup2(event_w, 1)
            os.dup2(devnull, 2)
            os.closerange(3, 65536)  # nothing of the test's (its pipes to other engines, its files) stays open
            os.environ.clear()
            os.environ.update(env)
            os.chdir(ROOT)
            sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", line_buffering=True)
            code = server.main()
        finally:
            os._exit(code)
    os.close(command_r)
    os.close(event_w)
    return ForkedProcess(pid, os.fdopen(command_w, "w", encoding="utf-8"), os.fdopen(event_r, "r", encoding="utf-8"))


def _forked_engine_class(engine: type) -> type:
    """The script's Engine with its process forked (fork_engine) rather than started."""

    class ForkedEngine(engine):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            import queue
            import threading

            self.process = fork_engine({**os.environ, "GHOSTVIEWER_ENGINE_THREADS": "1", "OMP_NUM_THREADS": "1"})
            self.events = queue.Queue()
            threading.Thread(target=self._read, daemon=True).start()

    return ForkedEngine

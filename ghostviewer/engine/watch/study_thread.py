"""The watch study's own writer thread: SQLite connections stay on the thread that opened them, and calls come from
any thread of the user's program.

A daemon thread with a queue rather than a ThreadPoolExecutor: the executor refuses work once the interpreter starts
shutting down, and a watcher left attached must still close its study from its atexit handler.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_STOP = object()


class StudyThread:
    def __init__(self, name: str = "ghostviewer-watch") -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                return
            job, future = item
            try:
                future.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)

    def submit(self, job: Callable[[], Any]) -> Future[Any]:
        """Run `job` on the thread; RuntimeError once stopped."""
        if self._closed:
            raise RuntimeError("the study thread is stopped")
        future: Future[Any] = Future()
        self._jobs.put((job, future))
        return future

    def stop(self, timeout: float | None = 30.0) -> None:
        """Run what is queued, then end the thread."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(_STOP)
        self._thread.join(timeout)

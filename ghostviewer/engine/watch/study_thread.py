"""The watch study's own writer thread: SQLite connections stay on the thread that opened them, and calls come from
any thread of the user's program.

A daemon thread with a queue rather than a ThreadPoolExecutor: the executor refuses work once the interpreter starts
shutting down, and a watcher left attached must still close its study from its atexit handler.

`later(job, delay_s)`: a job whose newest version only matters (the study's progress and result), run `delay_s` after
the first of its versions still pending, or when `flush_later()` is reached: calls in quick succession then cost one
commit each, not three.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_STOP = object()


class StudyThread:
    def __init__(self, name: str = "ghostviewer-watch") -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()
        self._later: tuple[float, Callable[[], Any]] | None = None  # (due, job): time.monotonic()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                wait = None if self._later is None else max(0.0, self._later[0] - time.monotonic())
            try:
                item = self._jobs.get(timeout=wait)
            except queue.Empty:
                self._run_later()
                continue
            if item is _STOP:
                return
            job, future = item
            try:
                future.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)

    def _run_later(self) -> None:
        with self._lock:
            later, self._later = self._later, None
        if later is not None:
            try:
                later[1]()
            except Exception:  # noqa: BLE001, S110 - the job handles its own errors; a stray one must not end the thread
                pass

    def submit(self, job: Callable[[], Any]) -> Future[Any]:
        """Run `job` on the thread; RuntimeError once stopped."""
        if self._closed:
            raise RuntimeError("the study thread is stopped")
        future: Future[Any] = Future()
        self._jobs.put((job, future))
        return future

    def later(self, job: Callable[[], Any], delay_s: float) -> None:
        """Run `job` on the thread within `delay_s`, unless a newer `later` job replaces it first (it is then run at
        the time this one would have been)."""
        if self._closed:
            raise RuntimeError("the study thread is stopped")
        with self._lock:
            due = time.monotonic() + delay_s if self._later is None else self._later[0]
            self._later = (due, job)
        self._jobs.put((lambda: None, Future()))  # wakes the thread to take the new due time

    def flush_later(self) -> Future[Any]:
        """Run the pending `later` job (if any) now, after the jobs queued before."""
        return self.submit(self._run_later)

    def stop(self, timeout: float | None = 30.0) -> None:
        """Run what is queued, then end the thread."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(_STOP)
        self._thread.join(timeout)

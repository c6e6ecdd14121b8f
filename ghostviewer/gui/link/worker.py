"""The GUI's one way to work off its thread (napari's `thread_worker`, Orange3's `TaskState`): a plain function,
given a cancel token (Task), runs on a small thread pool; its result — or the exception it raised — comes back on
the GUI thread as answered(tag, result). Models decide what to read and which answers they still want; a Worker
made with `latest=True` keeps only the newest wish (a new submit cancels the ones before: those not started never
run, and no cancelled task answers). `synchronous`: run in the calling thread and answer before submit returns
(tests). Every record read of the GUI goes through one of these.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, Qt, QThreadPool, Signal, SignalInstance

log = logging.getLogger("ghostviewer.gui")


class Cancelled(Exception):
    """Raised by Task.check() in a function whose task was cancelled; its answer is dropped."""


class Task:
    """One submitted function's cancel token: the GUI thread cancels, the function polls (`cancelled`, check())
    between the pieces of a long read."""

    def __init__(self, tag: object) -> None:
        self.tag = tag
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def check(self) -> None:
        if self._cancelled.is_set():
            raise Cancelled


Work = Callable[[Task], Any]


class _Job(QRunnable):
    def __init__(self, task: Task, work: Callable[[], Any], done: SignalInstance) -> None:
        super().__init__()
        self._task, self._work, self._done = task, work, done

    def run(self) -> None:
        if self._task.cancelled:
            return
        result = self._work()
        try:
            self._done.emit((self._task, result))  # queued to the GUI thread
        except RuntimeError:  # the worker was deleted meanwhile
            pass


class Worker(QObject):
    """Runs plain functions `work(task)` off the GUI thread, `threads` at a time, and answers each on the GUI
    thread as answered(tag, result); a function that raised answers its exception — logged with its traceback
    unless it is one of `expected` (a record that cannot be read: the model says so itself)."""

    answered = Signal(object, object)  # (the tag given to submit, the function's result or exception)
    _sigDone = Signal(object)  # (task, result) from a pool thread

    def __init__(self, threads: int = 1, *, latest: bool = False, synchronous: bool = False, what: str = "a read",
                 expected: tuple[type[BaseException], ...] = (), parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.latest, self.synchronous, self.what, self.expected = latest, synchronous, what, expected
        self.dropped = 0  # answers of cancelled tasks, not delivered
        self._tasks: list[Task] = []  # submitted, not answered yet
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(threads)
        self._sigDone.connect(self._on_done, Qt.ConnectionType.QueuedConnection)

    @property
    def busy(self) -> bool:
        """A submitted function has not answered yet (cancelled ones do not count)."""
        return any(not task.cancelled for task in self._tasks)

    def submit(self, tag: object, work: Work) -> Task:
        """Run work(task) off the GUI thread; answered(tag, result) follows on the GUI thread."""
        if self.latest:
            self.cancel()
        task = Task(tag)
        self._tasks.append(task)
        run = self._guarded(task, work)
        if self.synchronous:
            self._on_done((task, run()))
        else:
            self._pool.start(_Job(task, run, self._sigDone))
        return task

    def cancel(self) -> None:
        """Cancel every task not answered yet: the ones not started never run, none of them answers."""
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    def _guarded(self, task: Task, work: Work) -> Callable[[], Any]:
        what, expected = self.what, self.expected

        def run() -> Any:
            try:
                return work(task)
            except Cancelled as exc:
                return exc
            except expected as exc:
                return exc
            except Exception as exc:  # noqa: BLE001 - a worker always answers; the log keeps the traceback
                log.exception("%s failed", what)
                return exc
        return run

    def _on_done(self, message: tuple[Task, Any]) -> None:
        task, result = message
        if task in self._tasks:
            self._tasks.remove(task)
        if task.cancelled:
            self.dropped += 1
            return
        self.answered.emit(task.tag, result)

    def shutdown(self, timeout_ms: int = 2000) -> None:
        """Cancel what is queued or running and wait for the running functions."""
        self.cancel()
        self._pool.clear()
        self._pool.waitForDone(timeout_ms)

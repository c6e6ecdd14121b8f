"""The run's recorder on its own thread: the RunWriter (its SQLite connection, its files) lives on one thread that
writes, in order, what the runner hands it, while the pipeline goes on computing the next step.

The runner keeps the flight-recorder promise: a step's event is emitted only once the step is committed, and
always on the runner's thread (`release`), at most `backlog` steps after the step itself, so a cancel asked for
in a step event is still seen within a step or two. Host copies are made before anything is handed over: the
writer thread never touches a torch tensor. An error in the writer stops further writes (the run then fails
with it); `finish` always runs, so the record is closed whatever happened.

`hold=True` (a sweep's runs) starts no thread: every write waits for `finish`, which creates the record and writes it
on the caller's thread, committing once. Nothing of the run is on disk before it ends, and the pipeline never shares
the interpreter or the CPU with a recorder while it computes (on two cores a thread working beside torch costs it
more than the thread's own work). A sweep loses nothing by it: resuming re-runs a run that did not end.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ghostviewer.record import RunWriter

Job = Callable[[RunWriter], Any]
Emit = Callable[[dict[str, Any]], None]


class ThreadedWriter:
    """The RunWriter calls the runner makes, queued to the recorder thread (same names, same order)."""

    def __init__(self, create: Callable[[], RunWriter], hold: bool = False) -> None:
        self.hold = hold
        self._create = create
        self._held: list[tuple[Job, Future[Any], bool]] = []
        self._jobs: queue.SimpleQueue[tuple[Job, Future[Any], bool] | None] = queue.SimpleQueue()
        self._events: deque[tuple[Future[Any], dict[str, Any] | Callable[[], dict[str, Any]]]] = deque()
        self._error: BaseException | None = None
        self._writer: RunWriter | None = None
        self._created: Future[RunWriter] = Future()
        self._last: Future[Any] = self._created
        self._finished = False
        self._thread: threading.Thread | None = None
        if not hold:
            self._thread = threading.Thread(target=self._loop, name="ghostviewer-recorder", daemon=True)
            self._thread.start()

    # -- the thread (or, held, the caller's) ---------------------------------------------------------
    def _loop(self) -> None:
        self._make()
        while True:
            item = self._jobs.get()
            if item is None:
                return
            self._run(*item)

    def _make(self) -> None:
        if self._created.done():
            return
        try:
            self._writer = self._create()
            self._created.set_result(self._writer)
        except BaseException as exc:  # noqa: BLE001 - handed to the runner through the futures
            self._error = exc
            self._created.set_exception(exc)

    def _run(self, job: Job, future: Future[Any], always: bool) -> None:
        if self._writer is None or (self._error is not None and not always):
            future.set_exception(self._error or RuntimeError("no writer"))
            return
        try:
            future.set_result(job(self._writer))
        except BaseException as exc:  # noqa: BLE001
            self._error = self._error or exc
            future.set_exception(exc)

    def submit(self, job: Job, always: bool = False) -> Future[Any]:
        future: Future[Any] = Future()
        if self.hold:
            self._held.append((job, future, always))
        else:
            self._jobs.put((job, future, always))
        self._last = future
        return future

    def raise_if_not_created(self) -> None:
        """Wait for the record's creation (held: create it now); raise its error when there is no record at all."""
        if self.hold:
            self._make()
        if self._created.exception() is not None:
            self.finish("failed", 0.0)  # stops the thread
            raise self._created.exception()  # type: ignore[misc]

    def check(self) -> None:
        """Raise the writer's error (if any) in the runner's thread: a run whose record cannot be written fails."""
        if self._error is not None:
            raise self._error

    # -- RunWriter's interface ----------------------------------------------------------------------
    @property
    def path(self) -> Path:
        if self.hold:
            self._make()  # held: the record exists from the first time its path is asked for
        return self._created.result().path

    @property
    def finished(self) -> bool:
        return self._finished

    def event(self, kind: str, message: str, level: str = "info", **data: Any) -> None:
        self.submit(lambda w: w.event(kind, message, level=level, **data))

    def add_stats(self, rows: list[Any]) -> None:
        self.submit(lambda w: w.add_stats(rows))

    def save_tensors(self, name: str, tensors: dict[str, Any], step: int | None = None) -> None:
        self.submit(lambda w: w.save_tensors(name, tensors, step))

    def add_step(self, info: Any, tensors: Callable[[], dict[str, Any]]) -> None:
        """tensors: called on the recorder thread (previews are computed there, from host copies)."""
        if self.hold:  # held writes are committed once, at the end
            self.submit(lambda w: w.add_step(info, tensors(), commit=False))
        else:
            self.submit(lambda w: w.add_step(info, tensors()))

    def commit(self) -> None:
        self.submit(lambda w: w.commit())

    def set_verdict(self, verdict: dict[str, Any] | None, first_anomaly: dict[str, Any] | None) -> None:
        self.submit(lambda w: w.set_verdict(verdict, first_anomaly))  # type: ignore[arg-type]

    def save_image(self, name: str, image: Any) -> Future[Path]:
        return self.submit(lambda w: w.save_image(name, image))

    def finish(self, status: str, elapsed_s: float, error: str | None = None) -> None:
        """Close the record (always attempted, after everything queued) and stop the thread; waits for both."""
        if self._finished:
            return
        self._finished = True
        done = self.submit(lambda w: self._close(w, status, elapsed_s, error), always=True)
        if self.hold:
            self._make()
            held, self._held = self._held, []
            for item in held:
                self._run(*item)
        else:
            self._jobs.put(None)
            assert self._thread is not None
            self._thread.join()
        if self._created.exception() is None:
            done.result()

    def _close(self, writer: RunWriter, status: str, elapsed_s: float, error: str | None) -> None:
        """The final status: a run whose record could not be fully written did not end well, whatever the runner
        thought (a held run learns of a failed write only here)."""
        if self._error is not None and status == "done":
            interrupted = isinstance(self._error, KeyboardInterrupt)
            status = "cancelled" if interrupted else "failed"
            error = "interrupted" if interrupted else f"the record could not be written: {self._error}"
        writer.finish(status, elapsed_s, error=error)

    # -- events in step with the record ------------------------------------------------------------
    def after(self, event: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
        """Emit `event` (or what it returns, on the runner's thread) once everything queued so far is written."""
        self._events.append((self._last, event))

    def release(self, emit: Emit, backlog: int = 0) -> None:
        """Emit the events whose writes are done, waiting for the oldest ones until at most `backlog` remain
        (held writes are done only once the record is finished)."""
        if self.hold and not self._finished:
            return
        while self._events:
            future, event = self._events[0]
            if not future.done() and len(self._events) <= backlog:
                return
            self._events.popleft()
            try:
                future.result()
            except BaseException:  # noqa: BLE001 - the write failed: its event is not sent; check() raises
                continue
            emit(event() if callable(event) else event)

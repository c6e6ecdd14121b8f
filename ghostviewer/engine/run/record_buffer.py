"""The run's record, written in batches on the runner's own thread: the RunWriter calls the runner makes are queued
and carried out together, committed once, when the initial latents are drawn, at the end of a step once FLUSH_EVERY_S
has passed since the last batch, and when the run ends.

Why batches and no recorder thread: on two cores a thread writing beside torch cost the pipeline more than its own
work, and so did writing each step as it ended (block-depth tracing of the demo: 1.27× an untraced run with a
thread, 1.25× step by step, 1.17× in batches). Code run between two torch kernels runs cold, about twice as slow as
the same code run in a batch.

The flight-recorder promise, in time: a run killed midway keeps every step that ended more than FLUSH_EVERY_S
before it died — a due batch is also written at the first traced output after it falls due (in the middle of a slow
step), and the last step's batch before the decode; a step slower than that is committed as it ends. A step's event
is emitted only once the step is committed, on the runner's thread, and no event once a write or a batch's commit
has failed. Host copies are made before anything is queued: the queued writes never touch a
torch tensor. A write that fails stops the writes after it (`check` raises it; the run then fails with it); the
record is always closed.

`hold=True` (a sweep's runs) writes only when the run ends: nothing of the run is on disk before, and a sweep loses
nothing by it, since resuming re-runs a run that did not end.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ghostviewer.record import RunWriter

Job = Callable[[RunWriter], Any]
Emit = Callable[[dict[str, Any]], None]

FLUSH_EVERY_S = 0.1  # ten batches a second at most: the window's live views update at that pace


class BufferedWriter:
    """The RunWriter calls the runner makes (same names, same order), carried out in batches."""

    def __init__(self, create: Callable[[], RunWriter], hold: bool = False) -> None:
        self.hold = hold
        self._create = create
        self._queued: list[tuple[Job, Future[Any], bool]] = []
        self._events: deque[tuple[Future[Any], dict[str, Any] | Callable[[], dict[str, Any]]]] = deque()
        self._error: BaseException | None = None
        self._writer: RunWriter | None = None
        self._created: Future[RunWriter] = Future()
        self._last: Future[Any] = self._created
        self._finished = False
        self._flushed_at = time.perf_counter()

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

    def _flush(self) -> None:
        """Everything queued, in order, then one commit. A commit that fails (a full disk shows there) rolls the
        batch back; from then on no event is sent (release) and check() raises the error."""
        self._make()
        queued, self._queued = self._queued, []
        for item in queued:
            self._run(*item)
        if self._writer is not None and self._error is None and not self._finished:
            try:
                self._writer.commit()
            except Exception as exc:  # noqa: BLE001 - handed to the runner by check()
                self._error = exc
                with contextlib.suppress(Exception):
                    self._writer.conn.rollback()
        self._flushed_at = time.perf_counter()

    def submit(self, job: Job, always: bool = False) -> Future[Any]:
        future: Future[Any] = Future()
        self._queued.append((job, future, always))
        self._last = future
        return future

    def raise_if_not_created(self) -> None:
        """Create the record if it is not yet; raise its error when there is no record at all."""
        self._make()
        if self._created.exception() is not None:
            self.finish("failed", 0.0)
            raise self._created.exception()  # type: ignore[misc]

    def check(self) -> None:
        """Raise the writer's error (if any) in the runner: a run whose record cannot be written fails."""
        if self._error is not None:
            raise self._error

    # -- RunWriter's interface ----------------------------------------------------------------------
    @property
    def path(self) -> Path:
        self._make()  # the record exists from the first time its path is asked for
        return self._created.result().path

    @property
    def finished(self) -> bool:
        return self._finished

    def event(self, kind: str, message: str, level: str = "info", **data: Any) -> None:
        self.submit(lambda w: w.event(kind, message, level=level, **data))

    def add_stats(self, rows: list[Any]) -> None:
        self.submit(lambda w: w.add_stats(rows))

    def save_tensors(self, name: str, tensors: dict[str, Any], step: int | None = None) -> None:
        """Into the database, like the steps' (the initial noise, the prompt's embeddings, channel means)."""
        self.submit(lambda w: w.save_tensors(name, tensors, step, inline=True))

    def add_step(self, info: Any, tensors: Callable[[], dict[str, Any]]) -> None:
        """tensors: called when the batch is written (previews are computed then, from host copies)."""
        self.submit(lambda w: w.add_step(info, tensors(), commit=False))  # the batch commits once

    def set_verdict(self, verdict: dict[str, Any] | None, first_anomaly: dict[str, Any] | None,
                    first_warning: dict[str, Any] | None = None) -> None:
        self.submit(lambda w: w.set_verdict(verdict, first_anomaly, first_warning))  # type: ignore[arg-type]

    def save_image(self, name: str, image: Any) -> Future[Path]:
        return self.submit(lambda w: w.save_image(name, image))

    def finish(self, status: str, elapsed_s: float, error: str | None = None) -> None:
        """Write what is queued and close the record (always attempted)."""
        if self._finished:
            return
        self._finished = True
        done = self.submit(lambda w: self._close(w, status, elapsed_s, error), always=True)
        self._flush()
        if self._created.exception() is None:
            done.result()

    def discard(self) -> None:
        """A held record that is not wanted after all (a healthy watched call under keep="anomalies"): nothing of it
        is ever written, and it reads as finished. Only before anything was written."""
        if not self.hold or self._created.done():
            raise RuntimeError("only a held record that was never written can be discarded")
        self._finished = True
        self._queued.clear()
        self._events.clear()

    def _close(self, writer: RunWriter, status: str, elapsed_s: float, error: str | None) -> None:
        """The final status: a run whose record could not be fully written did not end well, whatever the runner
        thought (it may learn of a failed write only here)."""
        if self._error is not None and status == "done":
            interrupted = isinstance(self._error, KeyboardInterrupt)
            status = "cancelled" if interrupted else "failed"
            error = "interrupted" if interrupted else f"the record could not be written: {self._error}"
        writer.finish(status, elapsed_s, error=error)

    # -- events in step with the record ------------------------------------------------------------
    def after(self, event: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
        """Emit `event` (or what it returns, on the runner's thread) once everything queued so far is written."""
        self._events.append((self._last, event))

    def due_at(self) -> float | None:
        """When the pending batch is due (time.perf_counter()), None when nothing is pending or the record is held."""
        return None if self.hold or not self._queued else self._flushed_at + FLUSH_EVERY_S

    def release(self, emit: Emit, now: bool = False) -> None:
        """Write the batch when it is due (`now`, or FLUSH_EVERY_S since the last one; a held record only when it
        is finished), then emit the events whose writes are done."""
        due = now or time.perf_counter() - self._flushed_at >= FLUSH_EVERY_S
        if self._queued and due and not self.hold:
            self._flush()
        while self._events and self._events[0][0].done():
            future, event = self._events.popleft()
            # A failed write's event is not sent (check() raises its error), nor is any event once a write or a
            # batch's commit has failed: its writes may not be on disk.
            if future.exception() is None and self._error is None:
                emit(event() if callable(event) else event)

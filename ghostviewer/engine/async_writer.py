"""Record writes off the denoising thread: a single worker applies them to the RunWriter in order.

Encoding PNGs, writing safetensors and committing SQLite cost a few milliseconds a step; done inline they
would be a visible share of a small model's step. The worker keeps the flight-recorder order (a step's stats,
tensors and commit land together, steps in sequence). A hard kill can lose only the steps still queued.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from ghostviewer.record import RunWriter

_STOP = object()


class AsyncRunWriter:
    """Proxy with the RunWriter's write methods; `drain()` waits until every queued write is on disk."""

    QUEUED = ("add_stats", "add_step", "save_tensors", "save_image", "event", "commit", "then")

    def __init__(self, writer: RunWriter, max_queued: int = 64) -> None:
        self.writer = writer
        self.path = writer.path
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queued)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="ghostviewer-record", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            method, args, kwargs = item
            try:
                if self._error is None and method == "then":
                    args[0]()  # a callback that must run after the writes queued before it, e.g. "step k is on disk"
                elif self._error is None:
                    getattr(self.writer, method)(*args, **kwargs)
            except BaseException as exc:  # surfaced on the next drain(), on the caller's thread
                self._error = exc
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name not in self.QUEUED:
            raise AttributeError(name)

        def enqueue(*args: Any, **kwargs: Any) -> None:
            self._queue.put((name, args, kwargs))

        return enqueue

    def drain(self) -> RunWriter:
        """Wait for the queue to empty; re-raise a write error; return the underlying writer."""
        self._queue.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self.writer

    def close(self) -> RunWriter:
        self._queue.put(_STOP)
        self._thread.join()
        return self.drain()

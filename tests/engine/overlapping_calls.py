"""Two watched calls of one pipeline at once, for the watch tests: the first, on a thread of its own, holds at its
first step until the second (on the test's thread) has begun, so the two really overlap."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def call_overlapping(pipe: Any, watcher: Any, call: Callable[..., Any], first: dict[str, Any],
                     second: dict[str, Any]) -> None:
    """call(pipe, **first) on a second thread and call(pipe, **second) here, overlapping; both ended on return."""
    second_started = threading.Event()

    def wait_for_the_other(_pipe: Any, index: int, _timestep: Any, tensors: dict) -> dict:
        if index == 0:
            second_started.wait(timeout=30)
        return {}

    def mark(_pipe: Any, index: int, _timestep: Any, tensors: dict) -> dict:
        second_started.set()
        return {}

    thread = threading.Thread(target=call, args=(pipe,), kwargs={**first, "callback_on_step_end": wait_for_the_other})
    thread.start()
    while watcher.summary()["calls"] < 1:  # the first call has begun
        pass
    call(pipe, **second, callback_on_step_end=mark)
    thread.join(timeout=60)

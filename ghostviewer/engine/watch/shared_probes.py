"""One set of pipeline-level probes (interventions/probes.py: the initial latents, each scheduler step, x0) for
every watched call in flight on one pipeline object, each call handed its own thread's tensors.

Why shared: the probes patch the pipeline's `prepare_latents` and its scheduler's `step` on the instance, and patches
on one object must come off in the order they went on; two calls overlapping on two threads would each patch and
restore in the wrong order. Here the first call in flight puts the probes on and the last one out takes them off;
in between, a thread with no call joined (a call not watched) goes through untouched.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.interventions.probes import PipelineProbes
from ghostviewer.engine.run.recorder import ProbeHandlers


class SharedProbes:
    def __init__(self, pipe: Any) -> None:
        self._pipe = weakref.ref(pipe)  # kept per pipeline in a WeakKeyDictionary: its value must not hold its key
        self._lock = threading.Lock()
        self._calls: dict[int, ProbeHandlers] = {}
        self._probes: PipelineProbes | None = None

    @property
    def applied(self) -> bool:
        return self._probes is not None

    def _of_thread(self) -> ProbeHandlers | None:
        return self._calls.get(threading.get_ident())

    def _on_initial(self, latents: torch.Tensor) -> None:
        handlers = self._of_thread()
        if handlers is not None:
            handlers.on_initial(latents)

    def _on_x0(self, x0: torch.Tensor) -> None:
        handlers = self._of_thread()
        if handlers is not None:
            handlers.on_x0(x0)

    def _on_step(self, timestep: Any, latents: torch.Tensor) -> None:
        handlers = self._of_thread()
        if handlers is not None and handlers.on_step is not None:
            handlers.on_step(timestep, latents)

    def _record(self, *args: Any, **kwargs: Any) -> None:
        handlers = self._of_thread()
        if handlers is not None:
            handlers.record_tensor(*args, **kwargs)

    @contextmanager
    def joined(self, handlers: ProbeHandlers) -> Iterator[None]:
        """The probes on the pipeline while this call runs, handing it the tensors of `handlers.thread`."""
        with self._lock:
            if handlers.thread in self._calls:
                raise RuntimeError("a thread can be in one watched call of a pipeline at a time")
            if not self._calls:
                probes = PipelineProbes(on_x0=self._on_x0, on_initial=self._on_initial, on_step=self._on_step)
                probes.apply(RunContext(pipe=self._pipe(), prompt="", negative_prompt="", seed=0,
                                        current_step=lambda: None, record_tensor=self._record))
                self._probes = probes
            self._calls[handlers.thread] = handlers
        try:
            yield
        finally:
            with self._lock:
                del self._calls[handlers.thread]
                if not self._calls and self._probes is not None:
                    self._probes.remove()
                    self._probes = None

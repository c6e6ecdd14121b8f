"""Every DiffusionPipeline of the process watched (what `ghostviewer record -- PROGRAM` installs before the program
runs): those that exist already (found once, through the garbage collector's list) and every one made afterwards
(diffusers' `DiffusionPipeline.register_modules`, which every pipeline's `__init__` calls, is wrapped while the
watch lasts). `stop()` puts it all back.
"""

from __future__ import annotations

import functools
import gc
from pathlib import Path
from typing import Any

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.watch.watcher import Watcher


class ProcessWatch:
    def __init__(self, watcher: Watcher) -> None:
        from diffusers import DiffusionPipeline

        self.watcher = watcher
        self._base = DiffusionPipeline
        self._original = DiffusionPipeline.__dict__["register_modules"]
        original = self._original

        @functools.wraps(original)
        def register_modules(pipe: Any, **kwargs: Any) -> Any:
            result = original(pipe, **kwargs)
            self._add(pipe)
            return result

        DiffusionPipeline.register_modules = register_modules  # type: ignore[method-assign]
        for obj in gc.get_objects():
            if issubclass(type(obj), DiffusionPipeline):  # type(), not isinstance: no object's __class__ is asked
                self._add(obj)

    def _add(self, pipe: Any) -> None:
        if self.watcher.closed or getattr(type(pipe), "_ghostviewer_watcher", None) is not None:
            return
        try:
            self.watcher.add(pipe)
        except GhostError:
            pass  # watched by another watcher (ghostviewer.watch inside the program): left to it

    @property
    def runs(self) -> Any:
        return self.watcher.runs

    def summary(self) -> dict[str, Any]:
        return self.watcher.summary()

    def stop(self) -> dict[str, Any]:
        """Unwrap diffusers, put every pipeline's class back, close the study; returns the summary."""
        if self._base.__dict__.get("register_modules") is not self._original:
            self._base.register_modules = self._original  # type: ignore[method-assign]
        self.watcher.detach()
        return self.watcher.summary()

    detach = stop

    def __enter__(self) -> ProcessWatch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def watch_process(runs_dir: str | Path | None = None, keep: str | int = "all", depth: str = "block",
                  ring: int | None = None, max_bytes: int | None = None) -> ProcessWatch:
    """Watch every diffusers pipeline this process has or makes, until `stop()`."""
    return ProcessWatch(Watcher(runs_dir, keep=keep, depth=depth, ring=ring, max_bytes=max_bytes))

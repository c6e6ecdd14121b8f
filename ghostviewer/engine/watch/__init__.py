"""Watching the user's own pipeline calls: `watch(pipe)` (a context manager), `attach(pipe)` (a watcher to
`detach()`), `watch_process()` (every DiffusionPipeline made or called in this process: `ghostviewer record --`).

Every call while watched is traced, judged and recorded by the one recorder GhostViewer's own runs use; the keep
policy (keep.py) decides which full records stay, and every call leaves a one-row summary in the watch study.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ghostviewer.engine.watch.process import ProcessWatch, watch_process
from ghostviewer.engine.watch.program import run_program
from ghostviewer.engine.watch.watcher import Watcher, check_watchable


def attach(pipe: Any, runs_dir: str | Path | None = None, keep: str | int = "all", depth: str = "block",
           ring: int | None = None, max_bytes: int | None = None) -> Watcher:
    """Watch `pipe` until `detach()`; `.runs` (one CONTRACT run dict per call), `.summary()`."""
    check_watchable(pipe)  # before the study exists: a wrong argument leaves nothing in the history
    watcher = Watcher(runs_dir, keep=keep, depth=depth, ring=ring, max_bytes=max_bytes)
    try:
        watcher.add(pipe)
    except BaseException:
        watcher.detach()
        raise
    return watcher


@contextmanager
def watch(pipe: Any, runs_dir: str | Path | None = None, keep: str | int = "all", depth: str = "block",
          ring: int | None = None, max_bytes: int | None = None) -> Iterator[Watcher]:
    """`with ghostviewer.watch(pipe) as w: pipe(...)`: the pipeline is itself again when the block ends, however."""
    watcher = attach(pipe, runs_dir, keep=keep, depth=depth, ring=ring, max_bytes=max_bytes)
    try:
        yield watcher
    finally:
        watcher.detach()


__all__ = ["ProcessWatch", "Watcher", "attach", "run_program", "watch", "watch_process"]

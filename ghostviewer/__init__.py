"""GhostViewer: a debugger for intermittent bugs in diffusion pipelines.

`ghostviewer.watch(pipe)` / `ghostviewer.attach(pipe)` / `ghostviewer.watch_process()` load the engine (torch) only
when first used: `import ghostviewer` stays light (the GUI imports it and never torch).
"""

from typing import Any

from ghostviewer import gc_paused_imports

__version__ = "0.1.0"

_LAZY = {"watch", "attach", "watch_process"}
gc_paused_imports.install()  # the engine's first import (torch, diffusers) without a dozen useless full collections


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from ghostviewer.engine import watch as _watch

        return getattr(_watch, name)
    raise AttributeError(f"module 'ghostviewer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

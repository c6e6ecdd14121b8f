"""The cyclic garbage collector paused while a module of ghostviewer.engine is first executed, and in GhostViewer's
own processes the objects of that import frozen out of later collections.

The engine's first import brings in torch, diffusers, transformers and peft: ~670,000 long-lived objects, during
which the collector runs hundreds of passes, a dozen of them over everything allocated so far, and frees 1.5 %.
Measured on 2 cores (`ghostviewer run` of the demo, 20 steps): 1.25 CPU-s of collection before, 0.03 after; the
engine process's start 1.3 → 0.16 (its `import torch` comes before the first engine module).

- Any process (the API in a user's program too): the pause lasts while the outermost engine module executes; the
  next ordinary pass after it collects what the import left.
- GhostViewer's own processes (the `ghostviewer` command, the engine process): `gc.freeze()` once, at the end of
  the engine import that brought diffusers in (before any pipeline is loaded, and before `ghostviewer record` runs
  the user's program), moves everything then alive into the permanent generation, so no later pass walks torch's
  modules again (the import's ~10,000 dead objects, a few MB, stay). Never in a user's program, nor later: it would
  freeze their objects too, and a pipeline caught in a reference cycle could then never be freed.

Installed by `import ghostviewer`; stdlib only.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

PREFIX = "ghostviewer.engine"
OWN_MAINS = ("ghostviewer.engine.server",)  # `python -m ghostviewer.engine.server`, as the window starts it
FROZEN_AFTER = "diffusers"  # frozen once, when the import that brought it in ends: before any pipeline exists
_OWN_PROCESS = [False]


def own_process() -> None:
    """This process is GhostViewer's (the command's entry point says so): freeze after the engine's import."""
    _OWN_PROCESS[0] = True


def _owns_the_process() -> bool:
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return _OWN_PROCESS[0] or getattr(main_spec, "name", None) in OWN_MAINS


class _PausedLoader(Loader):
    """The module's own loader, its execution run with the collector paused (everything else passed through)."""

    def __init__(self, loader: Any, frozen_after: str) -> None:
        self._loader, self._frozen_after = loader, frozen_after

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        was_enabled = gc.isenabled()  # an engine module imported by another one: the outer one resumes
        first = self._frozen_after not in sys.modules
        gc.disable()
        try:
            self._loader.exec_module(module)
        finally:
            if was_enabled:
                if first and self._frozen_after in sys.modules and _owns_the_process():
                    gc.freeze()
                gc.enable()

    def __getattr__(self, name: str) -> Any:  # get_code, get_source, get_resource_reader, is_package, ...
        return getattr(self._loader, name)


class EngineImports(MetaPathFinder):
    """Gives the modules of `prefix` the spec the other finders give, their loader wrapped in _PausedLoader."""

    def __init__(self, prefix: str = PREFIX, frozen_after: str = FROZEN_AFTER) -> None:
        self.prefix, self.frozen_after = prefix, frozen_after

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != self.prefix and not fullname.startswith(self.prefix + "."):
            return None
        for finder in sys.meta_path:  # the spec the other finders give, as if this one were not there
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PausedLoader(spec.loader, self.frozen_after)
                return spec
        return None


def install() -> None:
    """Idempotent: one finder, first on sys.meta_path."""
    if not any(isinstance(finder, EngineImports) and finder.prefix == PREFIX for finder in sys.meta_path):
        sys.meta_path.insert(0, EngineImports())

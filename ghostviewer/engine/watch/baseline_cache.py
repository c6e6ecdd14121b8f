"""The baseline lookup of a watched pipeline's calls, made once per pipeline and settings rather than per call.

A lookup (engine/run/baseline_lookup.py) hashes the names and shapes of every component's tensors and reads the
baseline folders: ~4 ms a call on the demo, about 1 % of it. A watched service makes the same call again and again;
the answer is kept while the module tree is the same objects (a LoRA loaded or a component swapped is seen), the
baseline folders are unchanged (a baseline built meanwhile is seen) and for at most MAX_AGE_S (a baseline file
rewritten in place).
"""

from __future__ import annotations

import json
import time
import weakref
from pathlib import Path
from typing import Any

from ghostviewer.analysis.baseline_store import runs_dir_folders
from ghostviewer.engine.run.baseline_lookup import choose_baseline, key_settings
from ghostviewer.engine.run.recorder import BaselineLookup
from ghostviewer.spec import RunSpec

MAX_AGE_S = 30.0
_PER_PIPELINE = 8  # settings kept per pipeline (a service alternating a few sizes)


def _folder_state(runs_dir: Path) -> tuple[int | None, ...]:
    states: list[int | None] = []
    for folder in runs_dir_folders(runs_dir):
        try:
            states.append(folder.stat().st_mtime_ns)
        except OSError:
            states.append(None)
    return tuple(states)


class BaselineCache:
    def __init__(self) -> None:
        self._found: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[float, BaselineLookup]]] = (
            weakref.WeakKeyDictionary())

    def lookup(self, loaded: Any, settings: RunSpec, runs_dir: Path, signature: int) -> BaselineLookup:
        """choose_baseline's answer for this call, looked up now or kept from an earlier call."""
        key = (json.dumps(key_settings(loaded, settings.to_dict()), sort_keys=True, default=str), str(runs_dir),
               signature, _folder_state(runs_dir))
        try:
            kept = self._found.setdefault(loaded.pipe, {})
        except TypeError:  # not weak-referenceable: no cache
            kept = {}
        now = time.monotonic()
        hit = kept.get(key)
        if hit is not None and now - hit[0] < MAX_AGE_S:
            return hit[1]
        choice, note = choose_baseline(loaded, settings, runs_dir)
        found = BaselineLookup(choice, note)
        if len(kept) >= _PER_PIPELINE:
            kept.clear()
        kept[key] = (now, found)
        return found

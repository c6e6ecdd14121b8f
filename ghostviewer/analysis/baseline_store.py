"""Where baselines lie and the one way to read them: `<runs_dir>/baselines/<key>.json`, then the baselines the
project ships (`resources/baselines/`, the demo pipeline's at its default settings). Each file version is read
once (a small cache keyed by path, mtime and size), whether the engine looks one up for a new run or the GUI
for a recorded one. Also what a run record says about its baseline: the key it was judged against and the
per-channel means it recorded for later baselines. Numpy only.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ghostviewer.analysis.baseline import Baseline
from ghostviewer.analysis.baseline_file import load_baseline
from ghostviewer.analysis.baseline_match import ALL_PHASES, MatchPlan, judging_view
from ghostviewer.analysis.envelope import BaselineError
from ghostviewer.paths import resources_dir
from ghostviewer.record import RecordError

BASELINES_FOLDER = "baselines"  # <runs_dir>/baselines/<key>.json (engine/loops/baseline_build.py writes there)
SHIPPED_BASELINES = resources_dir() / BASELINES_FOLDER  # the demo's, built by scripts/build_demo_baseline.py
CHANNEL_MEANS_TENSORS = "channel_means"  # a run's tensors file of per-channel means, 'phase/module' -> (C,)


@functools.lru_cache(maxsize=32)
def _load(path: str, _mtime_ns: int, _size: int) -> Baseline:
    return load_baseline(path)


def find_baseline_file(key: str, folders: Iterable[Path]) -> tuple[Baseline, Path] | None:
    """The baseline named `key` in the first of `folders` that has a file of that name, read once per file
    version; None when none has. BaselineError (one line) when that file is not a usable baseline of that key."""
    for folder in folders:
        path = Path(folder) / f"{key}.json"
        try:
            stat = path.stat()
        except OSError:
            continue
        found = _load(str(path), stat.st_mtime_ns, stat.st_size)
        if found.key != key:
            raise BaselineError(f"{path} holds the baseline {found.key}, not {key} (renamed?)")
        return found, path
    return None


def all_baselines(folders: Iterable[Path]) -> tuple[list[Baseline], list[str]]:
    """Every usable baseline file in `folders` (each read once per file version, a name found again in a later
    folder skipped), and a one-line note for each file that is not a usable baseline."""
    found: list[Baseline] = []
    notes: list[str] = []
    seen: set[str] = set()
    for folder in folders:
        try:
            paths = sorted(Path(folder).glob("*.json"))
        except OSError:
            continue
        for path in paths:
            if path.name in seen:
                continue
            seen.add(path.name)
            try:
                stat = path.stat()
                found.append(_load(str(path), stat.st_mtime_ns, stat.st_size))
            except (OSError, BaselineError) as exc:
                notes.append(str(exc))
    return found, notes


def runs_dir_folders(runs_dir: str | Path | None) -> list[Path]:
    """Where a new run's baseline may lie: `baselines/` in its runs folder, then the shipped baselines."""
    return [*([Path(runs_dir) / BASELINES_FOLDER] if runs_dir is not None else []), SHIPPED_BASELINES]


def baseline_folders(run_dir: str | Path) -> list[Path]:
    """Where a recorded run's baseline may lie: `baselines/` in its runs folder (for a run inside a study,
    `<runs_dir>/<study>/runs/<run>`, also the folders above), then the shipped baselines."""
    parents = list(Path(run_dir).resolve().parents)[:3]
    return [*(p / BASELINES_FOLDER for p in parents), SHIPPED_BASELINES]


def recorded_baseline_key(events: Iterable[Any]) -> str | None:
    """The key of the baseline a run was judged against: its 'baseline' events carry it (None: none was used)."""
    for event in events:
        if getattr(event, "kind", None) != "baseline":
            continue
        key = (getattr(event, "data", None) or {}).get("baseline")
        if isinstance(key, str) and re.fullmatch(r"[0-9a-f]{16}", key):
            return key
    return None


def recorded_judging(events: Iterable[Any]) -> dict[str, Any] | None:
    """How a run's baseline judged it, as its 'baseline' event recorded it ({"match", "differences", "judged",
    "run_steps", "per_pixel", "weights_differ", …}); None for runs recorded before baselines matched by
    architecture, or judged by none."""
    for event in events:
        if getattr(event, "kind", None) == "baseline":
            judged = (getattr(event, "data", None) or {}).get("judged_by")
            if isinstance(judged, dict):
                return judged
    return None


def run_baseline(run_dir: str | Path, key: str | None, judged_by: Mapping[str, Any] | None = None
                 ) -> Baseline | None:
    """The baseline named `key` (recorded_baseline_key) as seen from a run; None when there is no key, no such
    file or the file is not a usable baseline. `judged_by` (recorded_judging): the view that judged the run (its
    step count on normalised time, per-pixel statistics, phases, architecture margins)."""
    if not key:
        return None
    try:
        found = find_baseline_file(key, baseline_folders(run_dir))
    except BaselineError:
        return None
    if found is None:
        return None
    if not judged_by or judged_by.get("match") in (None, "exact"):
        return found[0]
    phases = judged_by.get("judged")
    plan = MatchPlan(str(judged_by["match"]), tuple(judged_by.get("differences") or ()),
                     frozenset(phases) if isinstance(phases, list) else ALL_PHASES, judged_by.get("run_steps"),
                     bool(judged_by.get("per_pixel")), bool(judged_by.get("weights_differ")))
    return judging_view(found[0], plan)


def recorded_channel_means(record: Any) -> dict[tuple[str, str], np.ndarray]:
    """A run record's per-channel means of encode/decode outputs, keyed (phase, module); {} when it has none."""
    try:
        arrays = record.tensors(CHANNEL_MEANS_TENSORS)
    except (RecordError, KeyError, OSError):
        return {}
    found: dict[tuple[str, str], np.ndarray] = {}
    for name, values in arrays.items():
        phase, sep, module = name.partition("/")
        if sep:
            found[(phase, module)] = values
    return found


def channel_means_tensors(means: Mapping[tuple[str, str], np.ndarray]) -> dict[str, np.ndarray]:
    """Per-channel means keyed (phase, module) as a run record's tensors ('phase/module' -> (C,)), the form
    recorded_channel_means reads back."""
    return {f"{phase}/{module}": values for (phase, module), values in means.items()}

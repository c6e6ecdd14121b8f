"""A baseline on disk: one JSON file (never pickle), validated field by field when it is read.

```
{"format": "ghostviewer-baseline", "version": 1, "key": "<16 hex>",
 "identity": {"class": …, "weight_hashes": {…}}, "settings": {"scheduler", "steps", "width", "height", "dtype",
 "guidance"}, "buckets": 20, "stats": ["mean", "std", "absmax"], "margin": …, "channel_margin": …,
 "colour_margin": …, "meta": {"runs": …, …},
 "modules": {"denoise|3|unet.mid_block": {"shape": […], "median": [3], "scale": [3], "lo": [3], "hi": [3]}, …},
 "channels": {"decode|-|vae.decoder.mid_block": {"median": [C], "scale": [C], "lo": [C], "hi": [C],
              "subspace": {"center": [C], "basis": [C × k], "median": [1], "scale": [1], "lo": [1], "hi": [1]}}},
 "image": {"stats": ["mean_r", …], "median": […], …},
 "architecture": {"class": …, "components": {"unet": {"class": …, "structure": "<16 hex>", "config": {…}}, …}}}
```
The key must match the identity and settings it was built for (a file renamed or edited by hand is refused).
`architecture` (optional, not part of the key) is what lets a run of another model of the same architecture use
it (analysis/baseline_match.py); a file without one is used only by runs of its exact weights.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ghostviewer.analysis.baseline import FORMAT, STATS, VERSION, Baseline, key_text, parse_key_text
from ghostviewer.analysis.envelope import BaselineError, Envelope, Subspace, finite_number
from ghostviewer.safe_read import read_json


def baseline_to_json(baseline: Baseline) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "key": baseline.key,
        "identity": baseline.identity,
        "settings": baseline.settings,
        "buckets": baseline.buckets,
        "stats": list(STATS),
        "margin": baseline.margin,
        "channel_margin": baseline.channel_margin,
        "colour_margin": baseline.colour_margin,
        "meta": baseline.meta,
        "modules": {key_text(*k): {"shape": list(shape), **env.to_json()} for k, (shape, env) in
                    baseline.modules.items()},
        "channels": {key_text(*k): {**env.to_json(), "subspace": None if sub is None else sub.to_json()}
                     for k, (env, sub) in baseline.channels.items()},
        "image": None if baseline.image is None else {"stats": list(baseline.image[0]), **baseline.image[1].to_json()},
        **({"architecture": baseline.architecture} if baseline.architecture else {}),
    }


def save_baseline(baseline: Baseline, path: str | Path) -> Path:
    """Write the JSON file atomically (a reader never sees half a baseline); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(baseline_to_json(baseline), separators=(",", ":"), allow_nan=False), encoding="utf-8")
    os.replace(tmp, path)
    baseline.path = path
    return path


MAX_BASELINE_BYTES = 1024**3  # an SD-size baseline at leaf depth is tens of MB


def load_baseline(path: str | Path) -> Baseline:
    """Read and validate a baseline file; BaselineError (one line) when it is not a usable baseline. A baseline may
    come from anyone (a colleague's, a baselines folder): a FIFO or a device is never opened for reading, the size is
    capped before reading, JSON nested too deep and values of the wrong kind anywhere are said, not raised."""
    path = Path(path)
    data = read_json(path, lambda message: BaselineError(f"cannot read baseline {path}: {message}"),
                     max_bytes=MAX_BASELINE_BYTES, what=path.name)
    try:
        baseline = baseline_from_json(data, str(path))
    except BaselineError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        raise BaselineError(f"{path} is not a valid baseline ({type(exc).__name__}: {exc})") from None
    baseline.path = path
    return baseline


def _key(text: Any, where: str) -> tuple[str, int | None, str]:
    try:
        return parse_key_text(str(text))
    except ValueError:
        raise BaselineError(f"{where}: bad module key {text!r}") from None


def baseline_from_json(data: Any, where: str = "baseline") -> Baseline:
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise BaselineError(f"{where} is not a GhostViewer baseline")
    if data.get("version") != VERSION:
        raise BaselineError(f"{where} has baseline version {data.get('version')!r}; this GhostViewer reads {VERSION}")
    identity, settings = data.get("identity"), data.get("settings")
    if not isinstance(identity, Mapping) or not isinstance(settings, Mapping):
        raise BaselineError(f"{where} lacks its identity or settings")
    if list(data.get("stats") or []) != list(STATS):
        raise BaselineError(f"{where} holds statistics {data.get('stats')!r}, not {list(STATS)}")
    buckets = data.get("buckets")
    margins = [data.get(name) for name in ("margin", "channel_margin", "colour_margin")]
    if not isinstance(buckets, int) or buckets < 1 or not all(finite_number(m) and m > 0 for m in margins):
        raise BaselineError(f"{where} has a bad bucket count or margin")
    entries, channel_entries = data.get("modules"), data.get("channels") or {}
    if not isinstance(entries, Mapping) or not isinstance(channel_entries, Mapping):
        raise BaselineError(f"{where} has no module envelopes")
    modules = {}
    for text, entry in entries.items():
        shape = entry.get("shape") if isinstance(entry, Mapping) else None
        if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in shape):
            raise BaselineError(f"{where}: module {text!r} has no valid shape")
        modules[_key(text, where)] = (tuple(shape), Envelope.from_json(entry, len(STATS), text))
    channels = {}
    for text, entry in channel_entries.items():
        env = Envelope.from_json(entry, None, text)
        subspace = entry.get("subspace")
        channels[_key(text, where)] = (env, None if subspace is None else
                                       Subspace.from_json(subspace, len(env.median), f"{text} subspace"))
    image = None
    if data.get("image") is not None:
        names = data["image"].get("stats") if isinstance(data["image"], Mapping) else None
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise BaselineError(f"{where}: the image envelope has no statistic names")
        image = (tuple(names), Envelope.from_json(data["image"], len(names), "image"))
    margin, channel_margin, colour_margin = (float(m) for m in margins)
    architecture = data.get("architecture") or {}
    if not isinstance(architecture, Mapping) or not isinstance(architecture.get("components", {}), Mapping):
        raise BaselineError(f"{where}: its architecture is not an object of components")
    baseline = Baseline(dict(identity), dict(settings), buckets, modules, image, channels, margin, channel_margin,
                        colour_margin, dict(data.get("meta") or {}), architecture=dict(architecture))
    if data.get("key") != baseline.key:
        raise BaselineError(f"{where}: its key does not match its identity and settings (edited by hand?)")
    return baseline

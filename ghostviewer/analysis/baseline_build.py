"""Building a baseline from healthy runs' stat rows and final images (numpy only; the runs are made elsewhere)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ghostviewer.analysis.baseline import (
    CHANNEL_MARGIN,
    COLOUR_FLOOR,
    COLOUR_MARGIN,
    DRIFT_MARGIN,
    MAX_BUCKETS,
    REL_FLOOR,
    Baseline,
    settings_of,
    step_bucket,
)
from ghostviewer.analysis.envelope import BaselineError, Envelope, Subspace
from ghostviewer.analysis.image_stats import COLOUR_STATS, colour_stats
from ghostviewer.record import StatRow

MIN_RUNS = 8  # fewer healthy runs than this make no envelope worth trusting
_Key = tuple[str, int | None, str]


class BaselineBuilder:
    """Collects healthy runs (`add_run`) and turns them into a `Baseline` (`build`)."""

    def __init__(self, identity: Mapping[str, Any], settings: Mapping[str, Any], buckets: int | None = None) -> None:
        self.identity = dict(identity)
        self.settings = settings_of(settings)
        steps = int(self.settings.get("steps") or 1)
        self.buckets = buckets or min(steps, MAX_BUCKETS)
        self.runs = 0
        self._samples: dict[_Key, list[tuple[float, float, float]]] = {}
        self._shapes: dict[_Key, tuple[int, ...] | None] = {}
        self._image: list[dict[str, float]] = []
        self._channels: dict[_Key, list[np.ndarray]] = {}

    def add_run(self, rows: Iterable[StatRow], image: np.ndarray | None,
                channel_means: Mapping[tuple[str, str], np.ndarray] | None = None,
                extra_image_stats: Mapping[str, float] | None = None) -> None:
        """One healthy run: its stat rows (any order), its final image (float [0, 1] or uint8) and the
        per-channel means of its encode/decode outputs ((phase, module) -> (C,), as recorded_channel_means reads
        them from a record)."""
        for (phase, module), values in (channel_means or {}).items():
            vector = np.asarray(values, dtype=np.float64).reshape(-1)
            if vector.size and np.isfinite(vector).all():
                self._channels.setdefault((phase, None, module), []).append(vector)
        steps = int(self.settings.get("steps") or 1)
        for row in rows:
            if row.call != 0:
                continue
            values = (row.mean, row.std, row.absmax)
            if not all(np.isfinite(values)):
                continue
            key = (row.phase, step_bucket(row.step, steps, self.buckets), row.module)
            if self._shapes.setdefault(key, row.shape) != row.shape:
                self._shapes[key] = None  # the shape varies between runs: no envelope for it
            self._samples.setdefault(key, []).append(values)
        if image is not None:
            self._image.append({**colour_stats(image), **(extra_image_stats or {})})
        self.runs += 1

    def build(self, margin: float = DRIFT_MARGIN, channel_margin: float = CHANNEL_MARGIN,
              colour_margin: float = COLOUR_MARGIN, meta: Mapping[str, Any] | None = None,
              architecture: Mapping[str, Any] | None = None) -> Baseline:
        """`architecture`: what the pipeline is beyond its weights (engine/run/baseline_lookup.architecture_of),
        so that other models of the same architecture can be judged against it."""
        if self.runs < MIN_RUNS:
            raise BaselineError(f"a baseline needs at least {MIN_RUNS} healthy runs, got {self.runs}")
        per_bucket = max(1, int(self.settings.get("steps") or 1) // self.buckets)
        modules: dict[_Key, tuple[tuple[int, ...], Envelope]] = {}
        for key, samples in self._samples.items():
            shape = self._shapes.get(key)
            expected = self.runs * (per_bucket if key[1] is not None else 1)
            if shape is None or len(samples) < expected // 2:  # a module most healthy runs never call
                continue
            values = np.asarray(samples, dtype=np.float64)
            floor = REL_FLOOR * float(np.median(values[:, 2])) + 1e-12
            modules[key] = (shape, Envelope.of(values, floor))
        channels = {}
        for key, vectors in self._channels.items():
            sizes = {v.size for v in vectors}
            if len(sizes) != 1 or len(vectors) < self.runs // 2 or key not in modules:
                continue
            floor = REL_FLOOR * modules[key][1].median[2] + 1e-12  # the module's median absmax
            stacked = np.stack(vectors)
            channels[key] = (Envelope.of(stacked, floor), Subspace.fit(stacked, floor))
        image = None
        if self._image:
            names = [n for n in (*COLOUR_STATS, *sorted(set(self._image[0]) - set(COLOUR_STATS)))
                     if all(n in stats for stats in self._image)]
            values = np.asarray([[stats[n] for n in names] for stats in self._image], dtype=np.float64)
            image = (tuple(names), Envelope.of(values, COLOUR_FLOOR))
        return Baseline(self.identity, self.settings, self.buckets, modules, image, channels, margin,
                        channel_margin, colour_margin, {"runs": self.runs, **dict(meta or {})},
                        architecture=dict(architecture or {}))


def worst_excess(baseline: Baseline, rows: Iterable[StatRow],
                 channel_means: Mapping[tuple[str, str], np.ndarray] | None, image: np.ndarray | None
                 ) -> dict[str, tuple[float, str]]:
    """How close a run comes to drifting, for calibration: per check ('module', 'channel', 'colour') the largest
    excess beyond the healthy extremes, in scale units (compare with the margins), and where it is."""
    worst = {"module": (0.0, ""), "channel": (0.0, ""), "subspace": (0.0, ""), "colour": (0.0, "")}
    channels = channel_means or {}
    for row in rows:
        if row.call != 0:
            continue
        entry = baseline.modules.get((row.phase, baseline.bucket(row.step), row.module))
        if entry is not None and entry[0] == row.shape:
            value = max(entry[1].excess((row.mean, row.std, row.absmax)))
            if value > worst["module"][0]:
                worst["module"] = (value, f"{row.phase} {row.step} {row.module}")
        found = baseline.channels.get((row.phase, None, row.module))
        vector = channels.get((row.phase, row.module))
        if found is not None and vector is not None and len(vector) == len(found[0].median):
            env, subspace = found
            value = max(env.excess([float(v) for v in vector]))
            if value > worst["channel"][0]:
                worst["channel"] = (value, f"{row.phase} {row.module}")
            if subspace is not None:
                value = subspace.residual.excess([subspace.residual_of(vector)])[0]
                if value > worst["subspace"][0]:
                    worst["subspace"] = (value, f"{row.phase} {row.module}")
    if image is not None and baseline.image is not None:
        names, env = baseline.image
        stats = colour_stats(image)
        excess = env.excess([stats.get(n, float(env.median[i])) for i, n in enumerate(names)])
        i = int(np.argmax(excess))
        worst["colour"] = (float(excess[i]), names[i])
    return worst

"""What a run is judged against besides its own image: its pipeline's baseline and its prompt.

`RunJudge` is made once per run by the runner: it finds the baseline (or takes the one it is given), says which
in the run's event log, hands the anomaly detector its drift checks and the per-channel-means hooks they need,
and turns the image verdict into the verdict in context (analysis/verdict_context.py): the demo's colour check
for the demo pipeline, a CLIP score for others when a CLIP model is on this machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ghostviewer.analysis.anomaly import AnomalyDetector
from ghostviewer.analysis.baseline import Baseline
from ghostviewer.analysis.baseline_store import CHANNEL_MEANS_TENSORS
from ghostviewer.analysis.prompt_check import MIN_STEPS
from ghostviewer.analysis.verdict_context import verdict_in_context
from ghostviewer.analysis.verdicts import image_verdict
from ghostviewer.engine.loading.memory_identity import folder_of
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR, LoadedPipeline
from ghostviewer.engine.run.baseline_lookup import lookup_baseline
from ghostviewer.engine.run.clip_score import clip_score, find_local_clip
from ghostviewer.engine.tracing.channel_means import ChannelMeans
from ghostviewer.spec import RunSpec

AUTO = "auto"


def is_demo(loaded: LoadedPipeline) -> bool:
    if loaded.source_kind == "demo":
        return True
    if loaded.source_kind == "memory":  # the demo's weights, handed over as an object (memory_identity.py)
        folder = folder_of(loaded.pipe)
        return bool(loaded.weight_hashes) and folder is not None and folder.resolve() == DEMO_PIPELINE_DIR
    return loaded.source_kind == "folder" and Path(loaded.source).resolve() == DEMO_PIPELINE_DIR


class RunJudge:
    """`baseline`: AUTO (look it up), None (no baseline: a baseline build's own runs) or a Baseline to use."""

    def __init__(self, loaded: LoadedPipeline, settings: RunSpec, runs_dir: str | Path,
                 modules: list[tuple[str, nn.Module]], muted: list[Any], baseline: Baseline | str | None = AUTO
                 ) -> None:
        self.demo = is_demo(loaded)
        self.notes: list[tuple[str, str]] = []
        if self.demo and settings.steps < MIN_STEPS:
            self.demo = False
            self.notes.append(("info", f"prompt check skipped: the demo draws its colours reliably from {MIN_STEPS} "
                                       f"steps on, this run has {settings.steps}"))
        elif self.demo:
            self.notes.append(("info", "prompt check: the demo's colour check (shape and background colour)"))
        if isinstance(baseline, Baseline):
            self.baseline: Baseline | None = baseline
            self.notes.append(("info", f"using baseline {baseline.path or baseline.key} (given)"))
        elif baseline == AUTO:
            self.baseline, note = lookup_baseline(loaded, settings, runs_dir)
            self.notes.append(("info", note))
        else:
            self.baseline = None
            self.notes.append(("info", "no baseline: this run is not checked for drift (asked for)"))
        self.channels = ChannelMeans(modules, muted)
        self.clip: str | None = None
        if not is_demo(loaded):
            self.clip = find_local_clip()
            self.notes.append(("info", f"prompt check: CLIP model {self.clip}" if self.clip else
                               "prompt check skipped: no CLIP model on this machine (none is ever downloaded)"))

    def detector(self) -> AnomalyDetector:
        return AnomalyDetector(self.baseline, self.channels.values)

    @property
    def hooks(self) -> list[Any]:
        """Interventions to apply with the run's others (the per-channel means of encode/decode outputs)."""
        return [self.channels]

    def log(self, writer: Any) -> None:
        for level, note in self.notes:
            writer.event("prompt_check" if note.startswith("prompt check") else "baseline", note, level=level,
                         baseline=None if self.baseline is None else self.baseline.key)

    def save(self, writer: Any) -> None:
        """The per-channel means into the record: a baseline built later can use this run."""
        arrays = self.channels.arrays()
        if arrays:
            writer.save_tensors(CHANNEL_MEANS_TENSORS, arrays)

    def verdict(self, image: np.ndarray, prompt: str, writer: Any = None) -> dict[str, Any]:
        """The image verdict in context; a late note (a local CLIP model that fails) goes to `writer`."""
        verdict = image_verdict(image)
        extra: dict[str, float] = {}
        if self.clip is not None and verdict["label"] == "ok":
            try:
                extra["clip_score"] = clip_score(self.clip, image, prompt)
            except Exception as exc:  # noqa: BLE001 - a broken local model must not fail the run
                self.clip = None
                if writer is not None:
                    writer.event("prompt_check", f"prompt check skipped: the CLIP model failed: {exc}",
                                 level="warning")
        judged = verdict_in_context(verdict, image, prompt, self.baseline, demo=self.demo, extra_image_stats=extra)
        if extra:
            judged["scores"]["clip_score"] = round(extra["clip_score"], 3)
        return judged

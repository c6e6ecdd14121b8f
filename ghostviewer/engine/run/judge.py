"""What a run is judged against besides its own image: its pipeline's baseline and its prompt.

`RunJudge` is made once per run by the runner: it finds the baseline — exact, else the nearest of the same
architecture (baseline_lookup.py) — or takes the one it is given, says which and how it differs in the run's event
log and JSON (`baseline`), hands the anomaly detector its drift checks and the per-channel-means hooks they need,
and turns the image verdict into the verdict in context (analysis/verdict_context.py): the demo's colour check
for any pipeline whose tokenizer speaks the demo's vocabulary (the demo, a fine-tune or edit of it), a CLIP
score for others when a CLIP model is on this machine.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ghostviewer.analysis.anomaly import AnomalyDetector
from ghostviewer.analysis.baseline import PROMPT_TOKENS, Baseline
from ghostviewer.analysis.baseline_match import BaselineChoice
from ghostviewer.analysis.baseline_store import CHANNEL_MEANS_TENSORS
from ghostviewer.analysis.prompt_check import MIN_STEPS
from ghostviewer.analysis.verdict_context import verdict_in_context
from ghostviewer.analysis.verdicts import image_verdict
from ghostviewer.engine.judge_model.audit_cite import AuditCitation
from ghostviewer.engine.loading.memory_identity import folder_of
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR, LoadedPipeline
from ghostviewer.engine.run.baseline_lookup import choose_baseline, vocab_digest, vocabulary_hash
from ghostviewer.engine.run.clip_score import clip_score, find_local_clip
from ghostviewer.engine.run.control_effect import ControlEffect
from ghostviewer.engine.run.lora_effect import LoraEffect
from ghostviewer.engine.run.prompt_truncation import safe_truncation_findings
from ghostviewer.engine.tracing.channel_means import ChannelMeans
from ghostviewer.engine.tracing.prompt_tokens import token_ids
from ghostviewer.spec import RunSpec

AUTO = "auto"


def is_demo(loaded: LoadedPipeline) -> bool:
    if loaded.source_kind == "demo":
        return True
    if loaded.source_kind == "memory":  # the demo's weights, handed over as an object (memory_identity.py)
        folder = folder_of(loaded.pipe)
        return bool(loaded.weight_hashes) and folder is not None and folder.resolve() == DEMO_PIPELINE_DIR
    return loaded.source_kind == "folder" and Path(loaded.source).resolve() == DEMO_PIPELINE_DIR


@functools.lru_cache(maxsize=1)
def _demo_vocabulary() -> str | None:
    try:
        data = json.loads((DEMO_PIPELINE_DIR / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8"))
        return vocab_digest(data["model"]["vocab"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def speaks_demo(loaded: LoadedPipeline) -> bool:
    """Whether the pipeline's tokenizer has the demo's vocabulary: the demo, or a fine-tune or edit of it, whose
    images the demo's colour check can read."""
    if is_demo(loaded):
        return True
    tokenizer = getattr(loaded.pipe, "tokenizer", None)
    return tokenizer is not None and vocabulary_hash(tokenizer) is not None and \
        vocabulary_hash(tokenizer) == _demo_vocabulary()


class RunJudge:
    """`baseline`: AUTO (look it up), None (no baseline: a baseline build's own runs), a Baseline to use, a
    BaselineChoice (already chosen) or a Path to a baseline file the user chose. `signature`: the pipeline's module
    tree signature (tracer._tree_signature) just taken, which spares the weight audit's cache a walk of the tree.
    `sentinels`: the tracer's prompt sentinels among `modules`."""

    def __init__(self, loaded: LoadedPipeline, settings: RunSpec, runs_dir: str | Path,
                 modules: list[tuple[str, nn.Module]], muted: list[Any], baseline: Any = AUTO,
                 signature: int | None = None, sentinels: frozenset[str] = frozenset()) -> None:
        exact_demo = is_demo(loaded)
        self.demo = speaks = exact_demo or speaks_demo(loaded)  # is_demo resolves paths: asked once
        self.notes: list[tuple[str, str]] = []
        if self.demo and settings.steps < MIN_STEPS:
            self.demo = False
            self.notes.append(("info", f"prompt check skipped: the demo draws its colours reliably from {MIN_STEPS} "
                                       f"steps on, this run has {settings.steps}"))
        elif self.demo:
            whose = "" if exact_demo else " (its tokenizer speaks the demo's vocabulary; the weights are its own)"
            self.notes.append(("info", f"prompt check: the demo's colour check (shape and background colour){whose}"))
        self.choice: BaselineChoice | None = None
        if isinstance(baseline, Path):
            self.choice, note = choose_baseline(loaded, settings, runs_dir, given=baseline)
            self.notes.append(("info", note))
        elif isinstance(baseline, BaselineChoice):
            self.choice = baseline
            self.notes.append(("info", baseline.describe()))
        elif isinstance(baseline, Baseline):
            self.notes.append(("info", f"using baseline {baseline.path or baseline.key} (given)"))
        elif baseline == AUTO:
            self.choice, note = choose_baseline(loaded, settings, runs_dir)
            self.notes.append(("info", note))
        else:
            self.notes.append(("info", "no baseline: this run is not checked for drift (asked for)"))
        self.baseline: Baseline | None = (self.choice.baseline if self.choice is not None else
                                          baseline if isinstance(baseline, Baseline) else None)
        self.prompt_ids: list[int] | None = None  # asked only of a baseline that lists its prompts' tokens
        if self.baseline is not None and PROMPT_TOKENS in self.baseline.meta:
            self.prompt_ids = token_ids(loaded.pipe, settings.prompt)
            if not self.baseline.covers_prompt(self.prompt_ids):
                self.notes.append(("info", "the prompt has words the baseline's prompts never had: its text "
                                           "encoding is judged by its channel ranges and statistics only"))
        # the prompt sentinels (tracer.sentinels) write no row of their own while healthy: nothing to judge them by
        self.channels = ChannelMeans([(path, m) for path, m in modules if path not in sentinels], muted)
        self.control = ControlEffect.of(loaded.pipe)  # a pipeline with a ControlNet: did its control do anything?
        self.lora = LoraEffect.of(loaded.pipe)  # LoRA layers as the call starts: no effect, left loaded
        # a prompt longer than its tokenizer's limit (the tokenizer only, before the call)
        self.truncated = safe_truncation_findings(loaded.pipe, settings.prompt, settings.negative_prompt)
        # bad weights: the first anomaly's likely cause (cached)
        self.audit = AuditCitation(loaded.pipe, modules, signature)
        self._detector: AnomalyDetector | None = None
        self.clip: str | None = None
        if not speaks:
            self.clip = find_local_clip()
            self.notes.append(("info", f"prompt check: CLIP model {self.clip}" if self.clip else
                               "prompt check skipped: no CLIP model on this machine (none is ever downloaded)"))

    def detector(self) -> AnomalyDetector:
        self._detector = AnomalyDetector(self.baseline, self.channels.values, self.prompt_ids)
        return self._detector

    @property
    def hooks(self) -> list[Any]:
        """Interventions to apply with the run's others (the per-channel means of encode/decode outputs)."""
        return [self.channels, *([self.control] if self.control is not None else [])]

    @property
    def described(self) -> dict[str, Any] | None:
        """The run's `baseline` field: {"file", "key", "match": "exact|architecture", "differences", "judged", …};
        None when no baseline judged it."""
        if self.choice is not None:
            return self.choice.to_json()
        if self.baseline is not None:
            return {"file": str(self.baseline.path) if self.baseline.path else None, "key": self.baseline.key,
                    "match": "given", "differences": [], "given": True}
        return None

    def log(self, writer: Any) -> None:
        for level, note in self.notes:
            if note.startswith("prompt check"):
                writer.event("prompt_check", note, level=level,
                             baseline=None if self.baseline is None else self.baseline.key)
            else:
                writer.event("baseline", note, level=level,
                             baseline=None if self.baseline is None else self.baseline.key,
                             judged_by=self.described)

    def save(self, writer: Any) -> None:
        """The per-channel means into the record (a baseline built later can use this run), and the findings that a
        ControlNet's control had no effect (control_effect.py) and a LoRA had none or was left loaded
        (lora_effect.py), and a prompt truncated by its tokenizer (prompt_truncation.py)."""
        arrays = self.channels.arrays()
        if arrays:
            writer.save_tensors(CHANNEL_MEANS_TENSORS, arrays)
        finding = self.control.finding() if self.control is not None else None
        for kind, message, level, data in [*([finding] if finding else []),
                                           *(self.lora.findings() if self.lora is not None else []),
                                           *self.truncated]:
            writer.event(kind, message, level=level, **data)
        self.audit.cite(None if self._detector is None else self._detector.first, writer)

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

"""The numbers behind the attention view: cross-attention maps per prompt token, aggregated over layers (and
over steps, accumulated once per run), the prompt's token labels, the self-attention entropy summary. numpy
only, no Qt."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ghostviewer.record import RecordError, RunRecord

ATTN_PREFIX = "attn/"
ENTROPY_PREFIX = "attn_entropy/"
MAX_TOKENS = 16


def attention_layers(tensors: dict[str, np.ndarray]) -> list[str]:
    return [name[len(ATTN_PREFIX):] for name in tensors if name.startswith(ATTN_PREFIX)]


SPECIAL = {"<|startoftext|>": "⟨start⟩", "<|endoftext|>": "⟨end⟩"}
MAX_LABEL = 10


def prompt_tokens(record: RunRecord) -> list[tuple[str, int]]:
    """(label, id) for each real token of the prompt (the record's prompt event, else the ids alone)."""
    try:
        events = record.events(kind="prompt")
    except RecordError:
        events = []
    data = events[0].data if events else {}
    ids = [int(i) for i in data.get("ids") or []]
    labels = [str(label) for label in data.get("labels") or []]
    if not ids:
        try:
            ids = [int(i) for i in record.tensors("prompt")["ids"].ravel()]
        except (KeyError, RecordError):
            ids = []
    labels = labels if len(labels) == len(ids) else [str(i) for i in ids]
    return list(zip(labels, ids))


def tile_label(label: str) -> str:
    """A token's label short enough to sit over a small map."""
    label = SPECIAL.get(label, label)
    return label if len(label) <= MAX_LABEL else label[:MAX_LABEL - 1] + "…"


def _upsample(a: np.ndarray, height: int, width: int) -> np.ndarray:
    """(T, h, w) → (T, height, width), nearest neighbour (integer factors, as in a U-Net)."""
    fy, fx = max(1, height // a.shape[1]), max(1, width // a.shape[2])
    return np.repeat(np.repeat(a, fy, axis=1), fx, axis=2)[:, :height, :width]


def aggregate(maps: Iterable[np.ndarray], tokens: int) -> np.ndarray | None:
    """Mean of (T, h, w) maps over layers/steps at the largest resolution, first `tokens` tokens kept."""
    arrays = [np.asarray(m, np.float32)[:tokens] for m in maps]
    if not arrays:
        return None
    height, width = max(a.shape[1] for a in arrays), max(a.shape[2] for a in arrays)
    return np.mean([_upsample(a, height, width) for a in arrays], axis=0)


def layer_maps(tensors: dict[str, np.ndarray], layer: str | None) -> list[np.ndarray]:
    """The attention maps of one layer, or of every layer (layer None)."""
    return [v for name, v in tensors.items() if name.startswith(ATTN_PREFIX)
            and (layer is None or name == ATTN_PREFIX + layer)]


def entropy_summary(tensors: dict[str, np.ndarray]) -> str:
    """One line: the self-attention entropy (nats) of each layer at this step."""
    parts = []
    for name, value in tensors.items():
        if name.startswith(ENTROPY_PREFIX):
            layer = name[len(ENTROPY_PREFIX):].removeprefix("unet.").replace(".transformer_blocks.0.attn1", "")
            parts.append(f"{layer} {float(np.asarray(value, np.float64).ravel()[0]):.2f}")
    return ("self-attention entropy: " + " · ".join(parts)) if parts else ""


class AttentionRun:
    """Cross-attention maps summed per layer over the steps added so far: the mean over the run without keeping
    (or re-reading) every step. Equal to aggregate() over all the steps' maps, since the nearest-neighbour
    upsampling is linear."""

    def __init__(self) -> None:
        self.steps: set[int] = set()
        self._sums: dict[str, np.ndarray] = {}  # layer -> (≤MAX_TOKENS, h, w) float64
        self._counts: dict[str, int] = {}

    def add(self, step: int, tensors: Mapping[str, np.ndarray]) -> bool:
        """Add one step's maps (once per step); False when the step was already in."""
        if step in self.steps:
            return False
        self.steps.add(step)
        for name, value in tensors.items():
            if name.startswith(ATTN_PREFIX):
                layer, maps = name[len(ATTN_PREFIX):], np.asarray(value, np.float64)[:MAX_TOKENS]
                total = self._sums.get(layer)
                if total is None:
                    self._sums[layer], self._counts[layer] = maps, 1
                elif total.shape == maps.shape:
                    self._sums[layer], self._counts[layer] = total + maps, self._counts[layer] + 1
        return True

    def mean(self, layer: str | None, tokens: int) -> np.ndarray | None:
        """The mean map per token of one layer (or of every layer) over the steps added, like aggregate()."""
        layers = [name for name in self._sums if layer is None or name == layer]
        if not layers:
            return None
        height = max(self._sums[name].shape[1] for name in layers)
        width = max(self._sums[name].shape[2] for name in layers)
        total = sum(_upsample(self._sums[name][:tokens], height, width) for name in layers)
        return (total / sum(self._counts[name] for name in layers)).astype(np.float32)


def read_attention(record: RunRecord, steps: Sequence[int]) -> list[tuple[int, dict[str, np.ndarray]]]:
    """The attention maps of these steps, one step file each (runs on a worker; RecordError skips a step)."""
    out = []
    for step in steps:
        try:
            tensors = record.step_tensors(step)
        except RecordError:
            continue
        out.append((step, {k: v for k, v in tensors.items() if k.startswith(ATTN_PREFIX)}))
    return out

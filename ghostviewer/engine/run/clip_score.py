"""A CLIP image–text score for pipelines other than the demo, only from a CLIP model already on this machine.

Nothing is ever downloaded: the model is `$GHOSTVIEWER_CLIP` (a local folder in diffusers/transformers layout)
or one of CANDIDATES already in the Hugging Face cache (`local_files_only`). When none is there, the run's event
log says so and the check is skipped. The score is 100 × the cosine of the image and prompt embeddings, compared
with the baseline's healthy range when the baseline was built with the same model (its 'clip_score' statistic).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np

CANDIDATES = ("openai/clip-vit-base-patch32", "openai/clip-vit-base-patch16", "openai/clip-vit-large-patch14")
ENV_VAR = "GHOSTVIEWER_CLIP"


@functools.lru_cache(maxsize=1)
def find_local_clip() -> str | None:
    """A local CLIP model folder, or None; looks once per process and never downloads."""
    folder = os.environ.get(ENV_VAR)
    if folder and (Path(folder) / "config.json").is_file():
        return folder
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    for repo in CANDIDATES:
        try:
            path = snapshot_download(repo, local_files_only=True, allow_patterns=["*.json", "*.safetensors", "*.txt"])
        except Exception:  # noqa: BLE001 - not in the cache (or no cache at all): try the next one
            continue
        if (Path(path) / "config.json").is_file() and any(Path(path).glob("*.safetensors")):
            return path
    return None


@functools.lru_cache(maxsize=1)
def _model(folder: str) -> tuple[Any, Any]:
    from transformers import CLIPModel, CLIPProcessor

    model = CLIPModel.from_pretrained(folder, local_files_only=True, use_safetensors=True).eval()
    return model, CLIPProcessor.from_pretrained(folder, local_files_only=True)


def clip_score(folder: str, image: np.ndarray, prompt: str) -> float:
    """100 × cosine(image embedding, text embedding) for an (H, W, 3) image in [0, 1] (or uint8)."""
    import torch
    from PIL import Image

    from ghostviewer.analysis.image_stats import as_uint8

    model, processor = _model(folder)
    inputs = processor(text=[prompt], images=Image.fromarray(as_uint8(image)), return_tensors="pt", padding=True,
                       truncation=True)
    with torch.inference_mode():
        out = model(**inputs)
    image_emb = torch.nn.functional.normalize(out.image_embeds, dim=-1)
    text_emb = torch.nn.functional.normalize(out.text_embeds, dim=-1)
    return float(100.0 * (image_emb * text_emb).sum())

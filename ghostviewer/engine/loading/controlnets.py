"""The ControlNet of GhostViewer's own ControlNet runs: the pipeline's own `controlnet` component, or one loaded from
a folder (a saved ControlNetModel, or a pipeline folder's controlnet/ component) the way pipelines are loaded here —
safetensors only, headers checked before diffusers reads them, no weight left random, hashed for the record — and
checked against the pipeline it joins, one line each, before anything runs (diffusers' own error for a ControlNet of
another model comes mid-call as a tensor-shape mismatch).

A loaded ControlNet is kept on the LoadedPipeline (`controlnets`), so a loop that re-runs (replay, sweep) loads it
once; a folder whose files change is loaded again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ghostviewer.engine.errors import GhostError, PickleRefused, SourceError
from ghostviewer.engine.loading.hub_cache import MODEL_INDEX_MAX_BYTES, _call_diffusers, _dtype_keyword
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.loading.weight_files import (
    check_config_fits_weights,
    check_weights_match,
    component_weight_files,
    hash_files,
)
from ghostviewer.safe_read import read_json

COMPONENT = "controlnet"  # the pipeline component diffusers' ControlNet pipelines call it


def own_controlnet(pipe: Any) -> Any:
    """The pipeline's own ControlNet (a ControlNet pipeline's `controlnet` component), or None."""
    module = (getattr(pipe, "components", None) or {}).get(COMPONENT)
    return module if isinstance(module, torch.nn.Module) else None


def controlnet_folder(path: str | Path) -> Path:
    """The folder holding the ControlNet's config.json and weights: `path` itself, or its controlnet/ component
    when `path` is a pipeline folder."""
    folder = Path(path)
    if (folder / "model_index.json").is_file():
        if not (folder / COMPONENT / "config.json").is_file():
            raise SourceError(f"--controlnet {path}: this pipeline folder has no {COMPONENT}/ component")
        return folder / COMPONENT
    if not (folder / "config.json").is_file():
        raise SourceError(f"--controlnet {path}: no config.json (expected a saved ControlNetModel's folder, or a "
                          f"pipeline folder with a {COMPONENT}/ component)")
    return folder


def _model_class(folder: Path, label: str) -> type:
    import diffusers

    config = read_json(folder / "config.json", SourceError, max_bytes=MODEL_INDEX_MAX_BYTES)
    name = config.get("_class_name") if isinstance(config, dict) else None
    cls = getattr(diffusers, name, None) if isinstance(name, str) and "ControlNet" in name else None
    if not isinstance(cls, type) or not issubclass(cls, diffusers.ModelMixin):
        raise SourceError(f"{label}: its config.json names {name!r}, not a diffusers ControlNet model")
    return cls


def _stamp(folder: Path) -> tuple[tuple[str, int, int], ...]:
    return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()))


def load_controlnet(loaded: LoadedPipeline, path: str | Path) -> tuple[Any, str]:
    """(the ControlNet model in `path`, its weights' hash), on the device and in the dtype of the pipeline's
    denoiser, checked to fit it; loaded once per folder and content for this pipeline."""
    label = f"--controlnet {path}"
    folder = controlnet_folder(path).resolve()
    stamp = _stamp(folder)
    cached = loaded.controlnets.get(str(folder))
    if cached is not None and cached[0] == stamp:
        return cached[1], cached[2]
    try:
        files = component_weight_files(folder.parent, folder.name, allow_pickle=False)
    except PickleRefused:
        raise SourceError(f"{label}: only pickle weights (.bin/.ckpt); GhostViewer loads a ControlNet from "
                          "safetensors only — convert it (save_pretrained(..., safe_serialization=True))") from None
    denoiser = _denoiser(loaded.pipe)
    dtype = getattr(denoiser, "dtype", torch.float32)
    model_class = _model_class(folder, label)
    check_config_fits_weights(folder.parent, folder.name, model_class.__name__, files)  # before it is built
    model = _call_diffusers(label, model_class.from_pretrained, str(folder), local_files_only=True,
                            use_safetensors=True, **{_dtype_keyword(): dtype})
    check_weights_match(label, model, files)
    model.to(getattr(denoiser, "device", "cpu")).eval()
    check_fits(model, loaded.pipe, label)
    digest = hash_files(files)
    loaded.controlnets[str(folder)] = (stamp, model, digest)
    return model, digest


def _denoiser(pipe: Any) -> Any:
    return getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)


def check_fits(controlnet: Any, pipe: Any, label: str) -> None:
    """Refuse a ControlNet made for another model, in one line: its latent channels, block widths and text width
    must be the denoiser's, and its conditioning embedding must shrink the control image as the VAE does."""
    denoiser = _denoiser(pipe)
    ours, theirs = dict(getattr(denoiser, "config", {}) or {}), dict(getattr(controlnet, "config", {}) or {})
    for key, words in (("in_channels", "latent channels"), ("block_out_channels", "block widths"),
                       ("cross_attention_dim", "text-embedding width")):
        if key in ours and key in theirs and _plain(ours[key]) != _plain(theirs[key]):
            raise GhostError(f"{label} does not fit this pipeline ({type(pipe).__name__}): its {words} are "
                             f"{_plain(theirs[key])}, the {type(denoiser).__name__}'s {_plain(ours[key])} — a "
                             "ControlNet made for another model")
    widths = theirs.get("conditioning_embedding_out_channels")
    scale = getattr(pipe, "vae_scale_factor", None)
    if isinstance(widths, (list, tuple)) and widths and isinstance(scale, int):
        shrink = 2 ** (len(widths) - 1)
        if shrink != scale:
            raise GhostError(f"{label} does not fit this pipeline ({type(pipe).__name__}): its conditioning "
                             f"embedding shrinks the control image {shrink}×, the VAE {scale}× — a ControlNet made "
                             "for another model")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value

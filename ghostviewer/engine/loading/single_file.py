"""Load a whole-pipeline single-file checkpoint (.safetensors, or a pickle with --allow-pickle) offline: check it
holds a denoiser, find the diffusers configs of its family in the local cache (or take `config`), then hand it to
the pipeline class's from_single_file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import diffusers
import torch
from diffusers import DiffusionPipeline
from safetensors import safe_open

from ghostviewer.engine.errors import PickleRefused, SourceError
from ghostviewer.engine.loading.devices import DEFAULT_KEY
from ghostviewer.engine.loading.hub_cache import _one_line, cached_snapshot
from ghostviewer.engine.loading.offline_load import cached_hub_id, checked_components, load_offline, model_index_json
from ghostviewer.engine.loading.weight_files import PICKLE_SUFFIXES, SAFE_SUFFIXES, hash_files, validate_safetensors

SINGLE_FILE_HASH_KEY = "checkpoint"
# Key prefixes of a whole-pipeline checkpoint's denoiser in the original (non-diffusers) layouts.
DENOISER_PREFIXES = ("model.diffusion_model.", "double_blocks.", "joint_blocks.")


def _load_single_file(
    path: Path,
    dtypes: dict[str, torch.dtype],
    allow_pickle: bool,
    config: str | Path | None,
    cache_dir: str | Path | None,
) -> tuple[DiffusionPipeline, dict[str, str]]:
    with _checkpoint_view(path, allow_pickle) as checkpoint:
        config_dir = _single_file_config(path, checkpoint, config, cache_dir)
    checked_components(config_dir, dtypes)
    pipeline_class = _pipeline_class(config_dir)
    # from_single_file takes one dtype, not a mapping; passing float32 only adds a spurious cast warning.
    dtype = dtypes[DEFAULT_KEY] if dtypes[DEFAULT_KEY] != torch.float32 else None
    pipe = load_offline(str(path), pipeline_class.from_single_file, path, dtype, config=str(config_dir))
    for name, component_dtype in dtypes.items():
        component = getattr(pipe, name, None) if name != DEFAULT_KEY else None
        if isinstance(component, torch.nn.Module):
            component.to(component_dtype)
    return pipe, {SINGLE_FILE_HASH_KEY: hash_files([path])}


class _LazyCheckpoint(Mapping[str, torch.Tensor]):
    """A safetensors file as a read-only mapping that loads a tensor only when it is looked at.

    Enough for diffusers' model-type detection, which tests key presence and a few shapes.
    """

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._keys = list(handle.keys())
        self._key_set = set(self._keys)

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self._key_set:
            raise KeyError(key)
        return self._handle.get_tensor(key)

    def __contains__(self, key: object) -> bool:
        return key in self._key_set

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


@contextmanager
def _checkpoint_view(path: Path, allow_pickle: bool) -> Iterator[Mapping[str, Any]]:
    """The checkpoint's tensors by name, checked to hold a denoiser; safetensors are read lazily.

    A pickle checkpoint is read whole here and again by diffusers: the price of allowing pickle at all.
    """
    suffix = path.suffix.lower()
    if suffix == ".zip":
        raise SourceError(f"{path} is a bundle, not a pipeline; inspect it with `ghostviewer inspect {path}`")
    if suffix in PICKLE_SUFFIXES:
        if not allow_pickle:
            raise PickleRefused(f"{path.name} is a pickle checkpoint; pass --allow-pickle to load it")
        checkpoint: Mapping[str, Any] = _load_pickle_checkpoint(path)
        _check_has_denoiser(path, checkpoint)
        yield checkpoint
    elif suffix in SAFE_SUFFIXES:
        validate_safetensors(path)
        with safe_open(str(path), framework="pt") as handle:
            checkpoint = _LazyCheckpoint(handle)
            _check_has_denoiser(path, checkpoint)
            yield checkpoint
    else:
        raise SourceError(
            f"{path} is not a pipeline checkpoint "
            "(expected .safetensors, or .ckpt/.bin/.pt with --allow-pickle)"
        )


def _check_has_denoiser(path: Path, checkpoint: Mapping[str, Any]) -> None:
    if not any(key.startswith(DENOISER_PREFIXES) for key in checkpoint):
        raise SourceError(
            f"{path} is not a whole-pipeline checkpoint (no {DENOISER_PREFIXES[0]}* weights); "
            "single components and LoRA files cannot be loaded as a pipeline"
        )


def _load_pickle_checkpoint(path: Path) -> Mapping[str, Any]:
    try:
        # weights_only refuses arbitrary objects; this is the same call diffusers makes afterwards.
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise SourceError(f"{path} is not a readable PyTorch checkpoint: {_one_line(exc)}") from exc
    while isinstance(checkpoint, dict) and "state_dict" in checkpoint:
        checkpoint = checkpoint["state_dict"]
    if not isinstance(checkpoint, dict):
        raise SourceError(f"{path} holds a {type(checkpoint).__name__}, not a state dict")
    return checkpoint


def _single_file_config(
    path: Path, checkpoint: Mapping[str, Any], config: str | Path | None, cache_dir: str | Path | None
) -> Path:
    """The diffusers folder supplying configs for a checkpoint: `config` if given, else the family default
    (e.g. stable-diffusion-v1-5/stable-diffusion-v1-5) if it is in the local cache."""
    if config is not None:
        folder = Path(config).expanduser()
        if folder.is_dir():
            return folder
        if (cached := cached_hub_id(str(config), cache_dir)) is not None:
            return cached
        raise SourceError(f"config {config} is neither a diffusers folder nor a hub id")
    from diffusers.loaders.single_file_utils import fetch_diffusers_config, infer_diffusers_model_type

    family = infer_diffusers_model_type(checkpoint)
    repo_id = fetch_diffusers_config(checkpoint)["pretrained_model_name_or_path"]
    folder = cached_snapshot(repo_id, cache_dir)
    if folder is None or not (folder / "model_index.json").is_file():
        raise SourceError(
            f"{path.name} looks like a {family} checkpoint; loading it offline needs the diffusers "
            f"configs of {repo_id}, which are not in the local Hugging Face cache: fetch them with "
            f"`hf download {repo_id} --include '*.json' '*.txt'`, or pass --config FOLDER (config=FOLDER in the API) "
            "(a diffusers folder of the same model family)"
        )
    return folder


def _pipeline_class(config_dir: Path) -> type[DiffusionPipeline]:
    index = model_index_json(config_dir)
    name = index.get("_class_name") if isinstance(index, dict) else None
    pipeline_class = getattr(diffusers, name, None) if isinstance(name, str) else None
    if not (isinstance(pipeline_class, type) and issubclass(pipeline_class, DiffusionPipeline)):
        raise SourceError(f"{config_dir}/model_index.json names no diffusers pipeline class ({name!r})")
    if not hasattr(pipeline_class, "from_single_file"):
        raise SourceError(f"{name} cannot be loaded from a single-file checkpoint; use a diffusers folder")
    return pipeline_class

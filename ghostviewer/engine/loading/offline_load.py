"""The steps a diffusers load shares, whatever the source (a diffusers folder, a single-file checkpoint, the hub
cache): model_index.json read bounded, its components with --dtype checked against them, a hub id resolved in the
local cache only, and the loader called offline with whatever it raises turned into one SourceError line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from diffusers import DiffusionPipeline

from ghostviewer.engine.errors import SourceError
from ghostviewer.engine.loading.hub_cache import (
    _HUB_ID,
    MODEL_INDEX_MAX_BYTES,
    _call_diffusers,
    _check_dtype_components,
    _dtype_keyword,
    _require_cached,
    read_model_index,
)
from ghostviewer.safe_read import read_json


def model_index_json(folder: Path) -> Any:
    """A folder's model_index.json as it is (regular, bounded, not too deep); SourceError when unreadable."""
    return read_json(folder / "model_index.json", SourceError, max_bytes=MODEL_INDEX_MAX_BYTES)


def checked_components(folder: Path, dtypes: dict[str, torch.dtype]) -> dict[str, tuple[str, str]]:
    """The loadable components of model_index.json (name -> (library, class)); refuses a --dtype naming another."""
    components = read_model_index(folder)
    _check_dtype_components(dtypes, components)
    return components


def cached_hub_id(text: str, cache_dir: str | Path | None) -> Path | None:
    """The local snapshot of hub id `text` (SourceError when it is not cached); None when `text` is no hub id."""
    return _require_cached(text, cache_dir) if _HUB_ID.match(text) else None


def load_offline(label: str, loader: Any, location: Path, dtype: Any, **kwargs: Any) -> DiffusionPipeline:
    """loader(location) from local files only, `dtype` under the keyword this diffusers reads (None: not passed)."""
    dtype_kwargs = {} if dtype is None else {_dtype_keyword(): dtype}
    return _call_diffusers(label, loader, str(location), local_files_only=True, **dtype_kwargs, **kwargs)

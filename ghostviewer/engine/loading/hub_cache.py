"""What loading.py (diffusers folders) and single_file.py (checkpoints) share: finding hub ids in the local
cache, reading model_index.json, and calling diffusers quietly with its failures turned into one line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from diffusers import DiffusionPipeline
from huggingface_hub import constants as hub_constants
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

from ghostviewer.engine.errors import GhostError, SourceError
from ghostviewer.engine.loading.devices import DEFAULT_KEY
from ghostviewer.safe_read import read_json

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+\Z")


# --- the hub cache ---------------------------------------------------------------------------------------


def hub_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """The hub cache, from the environment as it is now (huggingface_hub reads it once, at import)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(hub_constants.HF_HUB_CACHE)


def cached_snapshot(repo_id: str, cache_dir: str | Path | None = None) -> Path | None:
    """The local snapshot folder of `repo_id` (its `main` ref), or None; never touches the network."""
    try:
        folder = snapshot_download(repo_id, cache_dir=hub_cache_dir(cache_dir), local_files_only=True)
    except (LocalEntryNotFoundError, HFValidationError, OSError):
        return None
    return Path(folder)


def _require_cached(repo_id: str, cache_dir: str | Path | None) -> Path:
    folder = cached_snapshot(repo_id, cache_dir)
    if folder is None:
        raise SourceError(
            f"{repo_id} is not in the local Hugging Face cache ({hub_cache_dir(cache_dir)}) and is no local "
            "folder either; GhostViewer does not download models unless you ask"
        )
    return folder


# --- model_index.json ------------------------------------------------------------------------------------


MODEL_INDEX_MAX_BYTES = 1024**2  # a real model_index.json is a few hundred bytes


def read_model_index(folder: Path) -> dict[str, tuple[str, str]]:
    """The loadable components listed in model_index.json: name -> (library, class)."""
    index_path = folder / "model_index.json"
    if not index_path.is_file():
        raise SourceError(f"{folder} is not a diffusers pipeline folder (no model_index.json)")
    index = read_json(index_path, SourceError, max_bytes=MODEL_INDEX_MAX_BYTES)  # regular, bounded, not too deep
    if not isinstance(index, dict):
        raise SourceError(f"{index_path} is not a JSON object")
    return {
        name: (value[0], value[1])
        for name, value in index.items()
        if not name.startswith("_") and isinstance(value, list) and len(value) == 2 and None not in value
    }


def _check_dtype_components(dtypes: dict[str, torch.dtype], components: Iterable[str]) -> None:
    unknown = sorted(set(dtypes) - {DEFAULT_KEY} - set(components))
    if unknown:
        raise GhostError(
            f"--dtype names {', '.join(unknown)}, but the pipeline has no such component "
            f"(it has: {', '.join(sorted(components))})"
        )


# --- calling diffusers -----------------------------------------------------------------------------------


def _dtype_keyword() -> str:
    # diffusers deprecated `torch_dtype` in favour of `dtype` (PR 14205); releases before it ignore `dtype`.
    try:
        from diffusers.utils import deprecation_utils
    except ImportError:
        return "torch_dtype"
    return "dtype" if hasattr(deprecation_utils, "_resolve_dtype") else "torch_dtype"


def _call_diffusers(label: str, loader: Any, *args: Any, **kwargs: Any) -> DiffusionPipeline:
    """Run a diffusers loader; whatever it raises becomes one SourceError line (the log keeps the cause)."""
    try:
        with _progress_bars_off():
            return loader(*args, **kwargs)
    except GhostError:
        raise
    except Exception as exc:
        raise SourceError(f"could not load {label}: {_one_line(exc)}") from exc


@contextmanager
def _progress_bars_off() -> Iterator[None]:
    """Silence diffusers' and transformers' loading bars for one call, then restore what the user had."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    was_on = diffusers_logging.is_progress_bar_enabled(), transformers_logging.is_progress_bar_enabled()
    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on[0]:
            diffusers_logging.enable_progress_bar()
        if was_on[1]:
            transformers_logging.enable_progress_bar()


def _one_line(exc: BaseException, limit: int = 300) -> str:
    # Joined rather than cut at the first newline: torch's "Error(s) in loading state_dict for X:" says
    # nothing until the line after it.
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"

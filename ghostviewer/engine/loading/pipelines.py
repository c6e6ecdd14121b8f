"""Load a pipeline from any source the CLI accepts: `demo`, a diffusers folder, a single-file checkpoint, a
cached hub id. Never downloads, never unpickles unless asked, and turns every failure into one clear line.

Everything is checked before diffusers sees it (component folders, weight formats, safetensors headers),
because diffusers' own errors are multi-line, sometimes misleading, and in one case (single-file loading
without a local config) fall back to downloading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from diffusers import DiffusionPipeline

from ghostviewer.engine.errors import GhostError, SourceError
from ghostviewer.engine.loading.devices import resolve_device, resolve_dtype
from ghostviewer.engine.loading.hub_cache import _one_line, cached_snapshot, hub_cache_dir, read_model_index
from ghostviewer.engine.loading.offline_load import cached_hub_id, checked_components, load_offline, model_index_json
from ghostviewer.engine.loading.single_file import DENOISER_PREFIXES, SINGLE_FILE_HASH_KEY, _load_single_file
from ghostviewer.engine.loading.weight_files import (
    EDGE_BYTES,
    LARGE_FILE_BYTES,
    PICKLE_SUFFIXES,
    SAFE_SUFFIXES,
    check_config_fits_weights,
    check_weights_match,
    component_weight_files,
    hash_files,
    validate_safetensors,
)
from ghostviewer.paths import resources_dir

# The public names, including those now in load_helpers, single_file and weight_files, stay importable from here.
__all__ = [
    "DEMO_PIPELINE_DIR",
    "DENOISER_PREFIXES",
    "EDGE_BYTES",
    "LARGE_FILE_BYTES",
    "PICKLE_SUFFIXES",
    "SAFE_SUFFIXES",
    "SINGLE_FILE_HASH_KEY",
    "SOURCE_KINDS",
    "LoadedPipeline",
    "cached_snapshot",
    "check_weights_match",
    "classify_source",
    "component_dtypes",
    "component_weight_files",
    "describe_source",
    "hash_files",
    "hub_cache_dir",
    "load_pipeline",
    "null_components",
    "read_model_index",
    "validate_safetensors",
]

DEMO_PIPELINE_DIR = resources_dir() / "demo-pipeline"

SOURCE_KINDS = ("demo", "folder", "single_file", "hub_cache")


@dataclass
class LoadedPipeline:
    pipe: DiffusionPipeline
    source: str
    source_kind: str  # one of SOURCE_KINDS
    device: str
    dtypes: dict[str, str]  # component -> "float32" etc., as loaded
    weight_hashes: dict[str, str]  # component -> first 16 hex chars of sha256 (see hash_files)
    identity_note: str = ""  # why an in-memory pipeline has no weight hashes (memory_identity.py)
    # prompt -> (tokens, embeddings) recorded by earlier runs (runner._record_prompt); loaded from disk, its text
    # encoder does not change between runs (faults are applied after), so sweeps and replays encode a prompt once
    prompt_cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # ControlNets loaded for this pipeline's runs (loading/controlnets.py): folder -> (its files' stamp, model, hash)
    controlnets: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


def load_pipeline(
    source: str | Path,
    device: str = "auto",
    dtype: str | None = None,
    allow_pickle: bool = False,
    *,
    config: str | Path | None = None,
    cache_dir: str | Path | None = None,
) -> LoadedPipeline:
    """Load `source` onto `device` in eval mode, progress bars off.

    `config` (single-file checkpoints only): a diffusers folder or cached hub id of the same model family,
    supplying the configs, tokenizers and scheduler the checkpoint lacks. `cache_dir`: the Hugging Face hub
    cache to look in (default: HF_HUB_CACHE / HF_HOME, read now rather than at import).
    """
    target = resolve_device(device)
    dtypes = resolve_dtype(dtype, target)
    kind, location = classify_source(source, cache_dir)
    if kind == "single_file":
        pipe, hashes = _load_single_file(location, dtypes, allow_pickle, config, cache_dir)
    else:
        pipe, hashes = _load_folder(location, dtypes, allow_pickle, label=str(source), shipped=kind == "demo")
    _prepare(pipe, target)
    return LoadedPipeline(
        pipe=pipe,
        source=str(source),
        source_kind=kind,
        device=target,
        dtypes=component_dtypes(pipe),
        weight_hashes=hashes,
    )


def describe_source(loaded: LoadedPipeline) -> dict[str, Any]:
    """What the run record's environment keeps about where the pipeline came from."""
    components = {
        name: {"class": type(component).__name__, "dtype": loaded.dtypes.get(name)}
        for name, component in loaded.pipe.components.items()
        if component is not None
    }
    return {
        "source": loaded.source,
        "kind": loaded.source_kind,
        "class": type(loaded.pipe).__name__,
        "device": loaded.device,
        "components": components,
        "weight_hashes": dict(loaded.weight_hashes),
    }


def component_dtypes(pipe: DiffusionPipeline) -> dict[str, str]:
    return {
        name: str(component.dtype).removeprefix("torch.")
        for name, component in pipe.components.items()
        if isinstance(component, torch.nn.Module) and hasattr(component, "dtype")
    }


# --- telling sources apart ------------------------------------------------------------------------------


def classify_source(source: str | Path, cache_dir: str | Path | None = None) -> tuple[str, Path]:
    """Return (kind, local path) for a source, or raise SourceError saying what it is instead."""
    text = str(source).strip()
    if isinstance(source, str) and text == "demo":
        if not (DEMO_PIPELINE_DIR / "model_index.json").is_file():
            raise SourceError(
                "the demo pipeline is missing from resources/demo-pipeline — run scripts/train_demo.py"
            )
        return "demo", DEMO_PIPELINE_DIR
    path = Path(text).expanduser()
    if path.is_file() and path.name == "model_index.json":
        path = path.parent
    if path.is_dir():
        _check_not_a_run(path)
        return "folder", path
    if path.is_file():
        return "single_file", path
    if (cached := cached_hub_id(text, cache_dir)) is not None:
        return "hub_cache", cached
    raise SourceError(
        f"no such pipeline: {text} (expected demo, a diffusers folder, a .safetensors checkpoint "
        "or a hub id in the local cache)"
    )


def _check_not_a_run(folder: Path) -> None:
    if (folder / "run.sqlite").is_file():
        raise SourceError(
            f"{folder} is a GhostViewer run, not a pipeline; open it with `ghostviewer gui {folder}` "
            f"or rerun it with `ghostviewer replay {folder}`"
        )


# --- diffusers folders (demo, folder, hub cache) ---------------------------------------------------------


def _load_folder(
    folder: Path, dtypes: dict[str, torch.dtype], allow_pickle: bool, label: str, shipped: bool = False
) -> tuple[DiffusionPipeline, dict[str, str]]:
    components = checked_components(folder, dtypes)
    weight_files = {
        name: files for name in components if (files := component_weight_files(folder, name, allow_pickle))
    }
    if not shipped:  # the demo is GhostViewer's own: its configs are its weights'
        for name, files in weight_files.items():
            library, class_name = components[name]
            if library == "diffusers":
                check_config_fits_weights(folder, name, class_name, files)
    hashes = {name: hash_files(files) for name, files in weight_files.items()}
    # low_cpu_mem_usage pinned: its default turns on when accelerate is installed (peft pulls it in), and loads (their
    # errors included) must not depend on that
    kwargs = {"use_safetensors": None if allow_pickle else True, "low_cpu_mem_usage": False}
    # Components saved as null (SD3 without T5: `text_encoder_3: [null, null]`) are passed as None, as they were
    # built; diffusers otherwise refuses the folder for missing them.
    kwargs.update(dict.fromkeys(null_components(folder)))
    pipe = load_offline(label, DiffusionPipeline.from_pretrained, folder, dtypes, **kwargs)
    for name, files in weight_files.items():
        check_weights_match(name, getattr(pipe, name, None), [f for f in files if f.suffix in SAFE_SUFFIXES])
    return pipe, hashes


def null_components(folder: Path) -> list[str]:
    """Components model_index.json lists as `[null, null]`: saved without one (SD3 without its T5 encoder)."""
    index = model_index_json(folder)
    if not isinstance(index, dict):
        return []
    return [
        name for name, value in index.items()
        if not name.startswith("_") and isinstance(value, list) and len(value) == 2 and value == [None, None]
    ]


# --- after loading ---------------------------------------------------------------------------------------


def _prepare(pipe: DiffusionPipeline, device: str) -> None:
    try:
        pipe.to(device)
    except RuntimeError as exc:  # out of memory, driver errors
        raise GhostError(f"could not move the pipeline to {device}: {_one_line(exc)}") from exc
    pipe.set_progress_bar_config(disable=True)
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            component.eval()

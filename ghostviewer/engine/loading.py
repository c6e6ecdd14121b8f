"""Load a pipeline from any source the CLI accepts: `demo`, a diffusers folder, a single-file checkpoint, a
cached hub id. Never downloads, never unpickles unless asked, and turns every failure into one clear line.

Everything is checked before diffusers sees it (component folders, weight formats, safetensors headers),
because diffusers' own errors are multi-line, sometimes misleading, and in one case (single-file loading
without a local config) fall back to downloading.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import diffusers
import torch
from diffusers import DiffusionPipeline
from huggingface_hub import constants as hub_constants
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from safetensors import SafetensorError, safe_open

from ghostviewer.engine.devices import DEFAULT_KEY, resolve_device, resolve_dtype
from ghostviewer.engine.errors import GhostError, PickleRefused, SourceError
from ghostviewer.paths import resources_dir

DEMO_PIPELINE_DIR = resources_dir() / "demo-pipeline"

SOURCE_KINDS = ("demo", "folder", "single_file", "hub_cache")
SAFE_SUFFIXES = (".safetensors",)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
LARGE_FILE_BYTES = 256 * 2**20  # above this, hash size + head + tail instead of every byte
EDGE_BYTES = 16 * 2**20
SINGLE_FILE_HASH_KEY = "checkpoint"
# Key prefixes of a whole-pipeline checkpoint's denoiser in the original (non-diffusers) layouts.
DENOISER_PREFIXES = ("model.diffusion_model.", "double_blocks.", "joint_blocks.")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class LoadedPipeline:
    pipe: DiffusionPipeline
    source: str
    source_kind: str  # one of SOURCE_KINDS
    device: str
    dtypes: dict[str, str]  # component -> "float32" etc., as loaded
    weight_hashes: dict[str, str]  # component -> first 16 hex chars of sha256 (see hash_files)


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
        pipe, hashes = _load_folder(location, dtypes, allow_pickle, label=str(source))
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
    if _HUB_ID.match(text):
        return "hub_cache", _require_cached(text, cache_dir)
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


# --- diffusers folders (demo, folder, hub cache) ---------------------------------------------------------


def _load_folder(
    folder: Path, dtypes: dict[str, torch.dtype], allow_pickle: bool, label: str
) -> tuple[DiffusionPipeline, dict[str, str]]:
    components = read_model_index(folder)
    _check_dtype_components(dtypes, components)
    weight_files = {
        name: files for name in components if (files := component_weight_files(folder, name, allow_pickle))
    }
    hashes = {name: hash_files(files) for name, files in weight_files.items()}
    kwargs = {_dtype_keyword(): dtypes, "use_safetensors": None if allow_pickle else True}
    # Components saved as null (SD3 without T5: `text_encoder_3: [null, null]`) are passed as None, as they were
    # built; diffusers otherwise refuses the folder for missing them.
    kwargs.update(dict.fromkeys(null_components(folder)))
    loader = DiffusionPipeline.from_pretrained
    pipe = _call_diffusers(label, loader, str(folder), local_files_only=True, **kwargs)
    for name, files in weight_files.items():
        check_weights_match(name, getattr(pipe, name, None), [f for f in files if f.suffix in SAFE_SUFFIXES])
    return pipe, hashes


def read_model_index(folder: Path) -> dict[str, tuple[str, str]]:
    """The loadable components listed in model_index.json: name -> (library, class)."""
    index_path = folder / "model_index.json"
    if not index_path.is_file():
        raise SourceError(f"{folder} is not a diffusers pipeline folder (no model_index.json)")
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"{index_path} cannot be read as JSON: {exc}") from exc
    if not isinstance(index, dict):
        raise SourceError(f"{index_path} is not a JSON object")
    return {
        name: (value[0], value[1])
        for name, value in index.items()
        if not name.startswith("_") and isinstance(value, list) and len(value) == 2 and None not in value
    }


def null_components(folder: Path) -> list[str]:
    """Components model_index.json lists as `[null, null]`: saved without one (SD3 without its T5 encoder)."""
    index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
    return [
        name for name, value in index.items()
        if not name.startswith("_") and isinstance(value, list) and len(value) == 2 and value == [None, None]
    ]


def component_weight_files(folder: Path, name: str, allow_pickle: bool) -> list[Path]:
    """The weight files diffusers will read for one component, validated; [] for weightless ones."""
    component = folder / name
    if not component.is_dir():
        raise SourceError(f"component {name!r} listed in model_index.json is missing (no folder {component})")
    if not (component / "config.json").is_file():
        return []  # schedulers, tokenizers, processors: no config.json, no weights
    safe = sorted(p for p in component.iterdir() if p.suffix in SAFE_SUFFIXES)
    pickles = sorted(p for p in component.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if safe:
        for path in safe:
            validate_safetensors(path)
        return safe
    if pickles and not allow_pickle:
        raise PickleRefused(
            f"{name} has only pickle weights ({pickles[0].name}); pass --allow-pickle to load them"
        )
    if pickles:
        return pickles
    raise SourceError(f"{name} has no weight files in {component} (expected .safetensors)")


def validate_safetensors(path: Path) -> list[str]:
    """Read the header (cheap); a truncated or foreign file fails here, naming the file. Returns the keys."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            return list(handle.keys())
    except (SafetensorError, OSError) as exc:
        raise SourceError(f"{path} is not a valid safetensors file (truncated or corrupt?): {exc}") from exc


def check_weights_match(name: str, model: Any, files: list[Path]) -> None:
    """Refuse a component whose model had to make up weights: parameters still on the meta device (diffusers'
    low_cpu_mem_usage path), or keys of the model that no weight file holds (diffusers and transformers fill
    those with random values, and the run's garbage would then be blamed on the pipeline). Reads only the
    files' headers."""
    if not isinstance(model, torch.nn.Module):
        return
    state = model.state_dict(keep_vars=True)
    on_meta = [key for key, tensor in state.items() if tensor.is_meta]
    if on_meta:
        raise SourceError(
            f"{name} was left without weights for {len(on_meta)} of its {len(state)} tensors "
            f"(e.g. {', '.join(on_meta[:3])}); its weight files do not match its {type(model).__name__}"
        )
    if not files:
        return
    file_keys: set[str] = set()
    for path in files:
        file_keys.update(validate_safetensors(path))
    missing, unexpected = _weight_key_mismatch(model, state, file_keys)
    if missing:
        extra = f"; the files hold {', '.join(unexpected[:3])} instead" if unexpected else ""
        raise SourceError(
            f"{name}'s weights do not match its {type(model).__name__}: the files in {files[0].parent} lack "
            f"{len(missing)} of its {len(list(model.parameters()))} weights, which would be random "
            f"(e.g. {', '.join(missing[:3])}){extra}"
            " — are these the weights of another model?"
        )


_LEGACY_ATTENTION_NAMES = {".query.": ".to_q.", ".key.": ".to_k.", ".value.": ".to_v.", ".proj_attn.": ".to_out.0."}


def _weight_key_mismatch(
    model: torch.nn.Module, state: Mapping[str, torch.Tensor], file_keys: set[str]
) -> tuple[list[str], list[str]]:
    """(model keys no file provides, file keys the model has no place for), both sorted, after the renames the
    loaders themselves make: diffusers' pre-0.14 attention names, transformers' base-model prefix, tied weights
    (stored once, shared by both names), and, where transformers marks what it loaded, its own key conversions."""
    known = set(file_keys)
    for key in file_keys:
        for old, new in _LEGACY_ATTENTION_NAMES.items():
            if old in key:
                known.add(key.replace(old, new))
    prefix = getattr(model, "base_model_prefix", "")
    if prefix:
        known.update(f"{prefix}.{key}" for key in file_keys)
        known.update(key.removeprefix(f"{prefix}.") for key in file_keys)
    # Buffers a file lacks are computed at construction, not drawn at random: only parameters count.
    parameters = {key for key, _ in model.named_parameters(remove_duplicate=False)}
    missing = [key for key in state if key not in known and key in parameters]
    if missing:
        provided = {state[key].data_ptr() for key in state if key in known and not state[key].is_meta}
        missing = [key for key in missing if state[key].data_ptr() not in provided or state[key].numel() == 0]
    if missing and any(hasattr(tensor, "_is_hf_initialized") for tensor in state.values()):
        # transformers >= 5 flags each tensor it loaded or tied; one without the flag was newly initialised.
        missing = [key for key in missing if not getattr(state[key], "_is_hf_initialized", False)]
    unexpected = [key for key in file_keys if key not in state]
    return sorted(missing), sorted(unexpected)


def _check_dtype_components(dtypes: dict[str, torch.dtype], components: Iterable[str]) -> None:
    unknown = sorted(set(dtypes) - {DEFAULT_KEY} - set(components))
    if unknown:
        raise GhostError(
            f"--dtype names {', '.join(unknown)}, but the pipeline has no such component "
            f"(it has: {', '.join(sorted(components))})"
        )


# --- single-file checkpoints -----------------------------------------------------------------------------


def _load_single_file(
    path: Path,
    dtypes: dict[str, torch.dtype],
    allow_pickle: bool,
    config: str | Path | None,
    cache_dir: str | Path | None,
) -> tuple[DiffusionPipeline, dict[str, str]]:
    with _checkpoint_view(path, allow_pickle) as checkpoint:
        config_dir = _single_file_config(path, checkpoint, config, cache_dir)
    components = read_model_index(config_dir)
    _check_dtype_components(dtypes, components)
    pipeline_class = _pipeline_class(config_dir)
    # from_single_file takes one dtype, not a mapping; passing float32 only adds a spurious cast warning.
    kwargs = {_dtype_keyword(): dtypes[DEFAULT_KEY]} if dtypes[DEFAULT_KEY] != torch.float32 else {}
    loader = pipeline_class.from_single_file
    pipe = _call_diffusers(
        str(path), loader, str(path), config=str(config_dir), local_files_only=True, **kwargs
    )
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
        if _HUB_ID.match(str(config)):
            return _require_cached(str(config), cache_dir)
        raise SourceError(f"config {config} is neither a diffusers folder nor a hub id")
    from diffusers.loaders.single_file_utils import fetch_diffusers_config, infer_diffusers_model_type

    family = infer_diffusers_model_type(checkpoint)
    repo_id = fetch_diffusers_config(checkpoint)["pretrained_model_name_or_path"]
    folder = cached_snapshot(repo_id, cache_dir)
    if folder is None or not (folder / "model_index.json").is_file():
        raise SourceError(
            f"{path.name} looks like a {family} checkpoint; loading it offline needs the diffusers "
            f"configs of {repo_id}, which are not in the local Hugging Face cache: fetch them with "
            f"`hf download {repo_id} --include '*.json' '*.txt'`, or pass config=FOLDER "
            "(a diffusers folder of the same model family)"
        )
    return folder


def _pipeline_class(config_dir: Path) -> type[DiffusionPipeline]:
    index = json.loads((config_dir / "model_index.json").read_text(encoding="utf-8"))
    name = index.get("_class_name")
    pipeline_class = getattr(diffusers, name, None) if isinstance(name, str) else None
    if not (isinstance(pipeline_class, type) and issubclass(pipeline_class, DiffusionPipeline)):
        raise SourceError(f"{config_dir}/model_index.json names no diffusers pipeline class ({name!r})")
    if not hasattr(pipeline_class, "from_single_file"):
        raise SourceError(f"{name} cannot be loaded from a single-file checkpoint; use a diffusers folder")
    return pipeline_class


# --- shared helpers --------------------------------------------------------------------------------------


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


def _prepare(pipe: DiffusionPipeline, device: str) -> None:
    try:
        pipe.to(device)
    except RuntimeError as exc:  # out of memory, driver errors
        raise GhostError(f"could not move the pipeline to {device}: {_one_line(exc)}") from exc
    pipe.set_progress_bar_config(disable=True)
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            component.eval()


def _one_line(exc: BaseException, limit: int = 300) -> str:
    # Joined rather than cut at the first newline: torch's "Error(s) in loading state_dict for X:" says
    # nothing until the line after it.
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def hash_files(paths: Iterable[Path]) -> str:
    """First 16 hex chars of sha256: of the bytes for one file (matches `sha256sum` when it is small),
    of (name, file digest) pairs for several."""
    files = sorted(paths, key=lambda p: p.name)
    if len(files) == 1:
        return _file_digest(files[0]).hex()[:16]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + _file_digest(path))
    return digest.hexdigest()[:16]


def _file_digest(path: Path) -> bytes:
    digest = hashlib.sha256()
    size = path.stat().st_size
    with path.open("rb") as handle:
        if size <= LARGE_FILE_BYTES:
            for chunk in iter(lambda: handle.read(2**20), b""):
                digest.update(chunk)
        else:  # a fingerprint, not a full hash: multi-GB checkpoints would take seconds to minutes
            digest.update(f"sampled:{size}:".encode())
            digest.update(handle.read(EDGE_BYTES))
            handle.seek(size - EDGE_BYTES)
            digest.update(handle.read(EDGE_BYTES))
    return digest.digest()

"""The weight files of a pipeline folder: which files diffusers will read for a component, checked before it
reads them (safetensors headers, pickle refused unless asked), checked again after (no weight left random), and
hashed for the run record.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from ghostviewer.engine.errors import PickleRefused, SourceError

SAFE_SUFFIXES = (".safetensors",)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
LARGE_FILE_BYTES = 256 * 2**20  # above this, hash size + head + tail instead of every byte
EDGE_BYTES = 16 * 2**20
# A config may describe up to twice the parameters its weight files hold, plus 64 M (256 MB in float32): below that,
# building it costs little and the check after the load names the weights that do not match.
CONFIG_SLACK, CONFIG_FLOOR = 2, 64_000_000


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


def check_config_fits_weights(folder: Path, name: str, class_name: str, files: list[Path]) -> None:
    """Refuse, before diffusers builds it, a diffusers model whose config.json describes far more parameters than
    its safetensors files hold: diffusers allocates and randomly initialises the whole model before it reads a
    weight (low_cpu_mem_usage off), so a config of another, larger model — or one edited to 100,000 channels —
    would take all the memory there is before check_weights_match could say so. The model is built on the meta
    device (no memory; ~0.1 s) to count; a config it cannot build is left to diffusers' own load to refuse."""
    import diffusers

    safe = [path for path in files if path.suffix in SAFE_SUFFIXES]
    model_class = getattr(diffusers, class_name, None)
    if not safe or not (isinstance(model_class, type) and issubclass(model_class, diffusers.ModelMixin)):
        return  # transformers builds on the meta device itself; pickle files have no header to count
    try:
        config = (folder / name / "config.json").stat()
        described = _described_parameters(str(folder / name), config.st_mtime_ns, config.st_size, class_name)
    except Exception:  # noqa: BLE001 - the load that follows says what is wrong with the config, in one line
        return
    held = 0
    for path in safe:
        with safe_open(str(path), framework="pt") as handle:
            held += sum(math.prod(handle.get_slice(key).get_shape()) for key in handle.keys())
    if described > CONFIG_SLACK * held + CONFIG_FLOOR:
        raise SourceError(
            f"{name}'s config.json describes a {class_name} of {described:,} parameters, but its weight files hold "
            f"{held:,}: not the config of these weights (refused before building a model that size)"
        )


@functools.lru_cache(maxsize=64)
def _described_parameters(component: str, mtime_ns: int, size: int, class_name: str) -> int:
    """Parameters of the model a component's config.json describes, built on the meta device (a third of a tiny
    folder's load: kept per config file and version, for the loops and tests that load one folder again)."""
    import diffusers

    model_class = getattr(diffusers, class_name)
    with torch.device("meta"):
        return sum(p.numel() for p in model_class.from_config(model_class.load_config(component)).parameters())


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


LEGACY_ATTENTION_NAMES = {".query.": ".to_q.", ".key.": ".to_k.", ".value.": ".to_v.", ".proj_attn.": ".to_out.0."}


def _weight_key_mismatch(
    model: torch.nn.Module, state: Mapping[str, torch.Tensor], file_keys: set[str]
) -> tuple[list[str], list[str]]:
    """(model keys no file provides, file keys the model has no place for), both sorted, after the renames the
    loaders themselves make: diffusers' pre-0.14 attention names, transformers' base-model prefix, tied weights
    (stored once, shared by both names), and, where transformers marks what it loaded, its own key conversions."""
    known = set(file_keys)
    for key in file_keys:
        for old, new in LEGACY_ATTENTION_NAMES.items():
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


# Digests of files already read, by what stat says of them: a pipeline loaded again (each `api.run("demo")`, a sweep's
# float16 copy, a replay) reads no weight byte twice. Only files left alone for SETTLED_NS are kept: any later write
# then gives them another mtime and ctime (timestamps are coarse: a file written twice in one tick could otherwise
# keep the first digest), and ctime cannot be set back.
_DIGESTS: dict[tuple[Any, ...], bytes] = {}
SETTLED_NS = 2_000_000_000
_DIGESTS_KEPT = 4096


def _file_digest(path: Path) -> bytes:
    info = path.stat()
    key = (str(path.resolve()), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
           LARGE_FILE_BYTES, EDGE_BYTES)
    cached = _DIGESTS.get(key)
    if cached is not None:
        return cached
    digest = _read_digest(path, info.st_size)
    if time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) > SETTLED_NS:
        if len(_DIGESTS) >= _DIGESTS_KEPT:
            _DIGESTS.clear()
        _DIGESTS[key] = digest
    return digest


def _read_digest(path: Path, size: int) -> bytes:
    digest = hashlib.sha256()
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

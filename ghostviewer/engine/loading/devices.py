"""Device and dtype choices from CLI-style strings (`--device`, `--dtype`)."""

from __future__ import annotations

import torch

from ghostviewer.engine.errors import GhostError

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}
DEFAULT_KEY = "default"


def _cuda_available() -> bool:
    return torch.cuda.is_available()


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(name: str) -> str:
    """'auto' picks cuda, then mps, then cpu; an explicit device must exist here."""
    wanted = (name or "auto").strip().lower()
    if wanted not in DEVICES:
        raise GhostError(f"unknown device {name!r}; choose one of: {', '.join(DEVICES)}")
    if wanted == "auto":
        if _cuda_available():
            return "cuda"
        return "mps" if _mps_available() else "cpu"
    if wanted == "cuda" and not _cuda_available():
        raise GhostError("CUDA was requested but is not available on this machine")
    if wanted == "mps" and not _mps_available():
        raise GhostError("MPS was requested but is not available on this machine")
    return wanted


def _parse_dtype(text: str, spec: str) -> torch.dtype:
    name = DTYPE_ALIASES.get(text.strip().lower(), text.strip().lower())
    if name not in DTYPES:
        raise GhostError(
            f"unknown dtype {text.strip()!r} in --dtype {spec!r}; choose float32, float16 or bfloat16"
        )
    return DTYPES[name]


def resolve_dtype(spec: str | None, device: str) -> dict[str, torch.dtype]:
    """Parse 'float16' or 'float32,vae=float16' into diffusers' per-component dtype mapping.

    The result always has a 'default' key (diffusers ≥0.33 reads `dtype.get(name, dtype["default"])`).
    """
    dtypes: dict[str, torch.dtype] = {DEFAULT_KEY: torch.float32}
    if spec is None or not spec.strip():
        return dtypes
    seen_default = False
    for part in spec.split(","):
        part = part.strip()
        if not part:
            raise GhostError(f"empty entry in --dtype {spec!r}")
        if "=" in part:
            component, _, value = part.partition("=")
            component = component.strip()
            if not component.isidentifier():
                raise GhostError(f"bad component name {component!r} in --dtype {spec!r}")
            if component in dtypes:  # the last one would win silently
                raise GhostError(f"--dtype {spec!r} names {component} twice")
            dtypes[component] = _parse_dtype(value, spec)
        elif seen_default:
            raise GhostError(f"--dtype {spec!r} names two defaults; use DTYPE,COMPONENT=DTYPE")
        else:
            dtypes[DEFAULT_KEY] = _parse_dtype(part, spec)
            seen_default = True
    _check_device_support(dtypes, device)
    return dtypes


def _check_device_support(dtypes: dict[str, torch.dtype], device: str) -> None:
    # float16 stays allowed on CPU: reproducing fp16 overflow there is a legitimate debugging move.
    if torch.bfloat16 in dtypes.values() and device == "cuda" and not torch.cuda.is_bf16_supported():
        raise GhostError("bfloat16 was requested but this GPU does not support it; use float16 or float32")

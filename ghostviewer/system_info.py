"""What an upstream bug report needs to know about this machine, without importing torch (bundles, the GUI):
`diffusers-cli env`'s list of versions and the platform. The engine adds what only torch can tell (CUDA, cuDNN,
GPUs, attention backends, determinism flags) in engine/run/environment.py's `torch_report`."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

# diffusers-cli env's packages, and those these bugs also depend on (PEFT adapters, xFormers attention, Triton).
PACKAGES = ("ghostviewer", "diffusers", "torch", "transformers", "accelerate", "peft", "safetensors",
            "huggingface-hub", "xformers", "bitsandbytes", "triton", "numpy", "flax", "jax", "jaxlib",
            "PySide6-Essentials")
LABELS = {"huggingface-hub": "Huggingface_hub", "PySide6-Essentials": "PySide6"}


def versions() -> dict[str, str | None]:
    """Each package's installed version, or None where it is not installed (read from metadata: nothing imported)."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "python": sys.version.split()[0],
                            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
    try:
        import psutil

        info["memory_gib"] = round(psutil.virtual_memory().total / 1024**3, 1)
    except ImportError:  # pragma: no cover - a dependency; only a broken install lacks it
        pass
    return info


def system_report() -> dict[str, Any]:
    return {**machine(), "packages": versions()}


def format_report(report: dict[str, Any]) -> str:
    """The report as diffusers' issue template asks for it: a bullet list to paste under "System Info"."""
    lines = [f"- Platform: {report.get('platform')}", f"- Python version: {report.get('python')}",
             f"- CPU: {report.get('cpu')} ({report.get('cpu_count')} cores)"]
    if report.get("memory_gib") is not None:
        lines.append(f"- Memory: {report['memory_gib']} GiB")
    for name, version in (report.get("packages") or {}).items():
        lines.append(f"- {LABELS.get(name, name)} version: {version or 'not installed'}")
    for key, label in (("torch_build", "PyTorch build"), ("cuda_available", "CUDA available"),
                       ("cuda", "CUDA (torch built with)"), ("cudnn", "cuDNN"), ("gpus", "GPUs"),
                       ("attention", "Attention backends (SDPA)"), ("determinism", "Determinism flags"),
                       ("torch_threads", "torch threads")):
        if key in report:
            lines.append(f"- {label}: {_shown(report[key])}")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return "; ".join(_shown(v) for v in value) or "none"
    return str(value)

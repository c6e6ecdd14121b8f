"""The environment of a run, recorded with it: versions, device, dtypes, determinism flags, weight hashes."""

from __future__ import annotations

import functools
import os
import platform
import sys
from typing import Any

import diffusers
import torch
import transformers

import ghostviewer
from ghostviewer.engine.tracing import fused_stats
from ghostviewer.record.types import FINGERPRINT_KIND


def determinism_flags() -> dict[str, Any]:
    cudnn = torch.backends.cudnn
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(cudnn.deterministic),
        "cudnn_benchmark": bool(cudnn.benchmark),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(cudnn.allow_tf32),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


@functools.cache
def _versions() -> dict[str, Any]:
    return {
        "ghostviewer": ghostviewer.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
        "transformers": transformers.__version__,
        "cpu_count": os.cpu_count(),
    }


def describe_environment(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        **_versions(),
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "determinism": determinism_flags(),
        "fingerprint": FINGERPRINT_KIND,  # runs with another kind compare by statistics (analysis/compare.py)
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
        info.update(fused_stats.describe())  # how its outputs' statistics are reduced: one Triton kernel, or torch
    return info

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


def torch_report() -> dict[str, Any]:
    """What only torch can tell a bug report: its build, CUDA and cuDNN, each GPU, the attention backends that
    scaled_dot_product_attention may pick, determinism flags (ghostviewer env; export --issue)."""
    from ghostviewer.system_info import system_report

    report: dict[str, Any] = {**system_report(), "torch_build": torch.__version__,
                              "cuda_available": torch.cuda.is_available(), "torch_threads": torch.get_num_threads()}
    if torch.version.cuda:
        report["cuda"] = torch.version.cuda
    if torch.backends.cudnn.is_available():
        report["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        report["gpus"] = [
            {"name": props.name, "memory_gib": round(props.total_memory / 1024**3, 1),
             "capability": f"{props.major}.{props.minor}"}
            for props in (torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count()))
        ]
    cuda = torch.backends.cuda
    report["attention"] = {name: bool(getattr(cuda, f"{name}_sdp_enabled")()) for name in
                           ("flash", "mem_efficient", "math", "cudnn") if hasattr(cuda, f"{name}_sdp_enabled")}
    report["determinism"] = determinism_flags()
    return report

"""A copy of the demo pipeline folder with one weights file edited the way a bad merge or conversion would: the
silent-ghost cases judged by architecture, by a reference and by the audit."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR


def edited_demo(root: Path, name: str, file: str, change: Callable[[dict[str, Any]], None]) -> Path:
    """`root/name`: the demo's folder with `change` applied to the tensors of `file` (e.g. the U-Net's weights)."""
    folder = root / name
    shutil.copytree(DEMO_PIPELINE_DIR, folder)
    tensors = load_file(folder / file)
    change(tensors)
    save_file({k: v.contiguous() for k, v in tensors.items()}, folder / file)
    return folder

"""REAL demo runs for the window tests, made in this process (torch is imported once a worker, as the engine tests
import it anyway) once per distinct setting and handed out as copies, so a test may annex to or corrupt its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

_MADE: dict[str, Path] = {}
_BLOCKS: list[dict[str, Any]] = []


def demo_run(factory: pytest.TempPathFactory, runs_dir: Path, prompt: str, **settings: Any) -> Path:
    """`api.run("demo", prompt, **settings)`, made once a process, copied into `runs_dir`: the copy's folder."""
    key = json.dumps([prompt, settings], sort_keys=True)
    if key not in _MADE:
        from ghostviewer import api

        made = api.run("demo", prompt, runs_dir=factory.mktemp("demo-run"), **settings)
        _MADE[key] = Path(made["run_dir"])
    source = _MADE[key]
    runs_dir.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copytree(source, runs_dir / source.name, symlinks=True))


def demo_blocks() -> list[dict[str, Any]]:
    """`api.blocks("demo")["blocks"]`, read once a process (a copy each call)."""
    if not _BLOCKS:
        from ghostviewer import api

        _BLOCKS.extend(api.blocks("demo")["blocks"])
    return [dict(block) for block in _BLOCKS]

"""Shared engine fixtures: tiny pipelines built offline from configs, saved once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.tiny_pipelines import save_tiny_sd


@pytest.fixture(scope="session")
def tiny_sd_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny StableDiffusionPipeline saved in diffusers' layout. Read-only: copy it before changing it."""
    return save_tiny_sd(tmp_path_factory.mktemp("tiny-sd") / "pipeline")

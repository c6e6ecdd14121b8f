"""Suite-wide fixtures: the embedded demo pipeline, loaded once, and a fresh runs folder per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

DEMO_DIR = Path(__file__).resolve().parents[1] / "resources" / "demo-pipeline"


@pytest.fixture(scope="session")
def demo_loaded():
    """The real demo pipeline (shared: tests must leave it as they found it — the runner guarantees that)."""
    assert (DEMO_DIR / "model_index.json").exists(), "resources/demo-pipeline is missing"
    from ghostviewer.engine.loading.pipelines import load_pipeline

    return load_pipeline("demo", device="cpu")


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path

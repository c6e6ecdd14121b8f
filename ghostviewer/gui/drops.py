"""What a path dropped on the window (or given to `ghostviewer gui PATH`) is."""

from __future__ import annotations

from pathlib import Path

from ghostviewer.analysis.prompt_lists import PROMPT_LIST_SUFFIXES

CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt", ".bin", ".pt", ".pth")


def classify_path(path: str | Path) -> str | None:
    """'pipeline' | 'checkpoint' | 'run' | 'runs_dir' | 'prompts' | 'bundle', or None when unknown."""
    path = Path(path)
    if path.is_dir():
        if (path / "model_index.json").is_file():
            return "pipeline"
        if (path / "run.sqlite").is_file():
            return "run"
        try:
            if any((child / "run.sqlite").is_file() for child in path.iterdir() if child.is_dir()):
                return "runs_dir"
        except OSError:
            return None
        return None
    if not path.is_file():
        return None
    suffix = path.suffix.lower()
    if suffix in CHECKPOINT_SUFFIXES:
        return "checkpoint"
    if suffix in PROMPT_LIST_SUFFIXES:
        return "prompts"
    if suffix == ".zip":
        return "bundle"
    return None

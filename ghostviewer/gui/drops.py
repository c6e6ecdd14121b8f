"""What a path dropped on the window (or given to `ghostviewer gui PATH`) is."""

from __future__ import annotations

from pathlib import Path

from ghostviewer.spec.prompt_lists import PROMPT_LIST_SUFFIXES

CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt", ".bin", ".pt", ".pth")
RUN_FILES = ("run.lock", "run.sqlite-wal", "run.sqlite-shm")  # what a run writes beside its database
RUN_FOLDERS = ("tensors", "images")


def looks_like_run(folder: Path) -> bool:
    """A run folder, even one whose run.sqlite is gone: it is a broken run (the reader says why), not an unknown."""
    return (any((folder / name).is_file() for name in RUN_FILES)
            or all((folder / name).is_dir() for name in RUN_FOLDERS))


def classify_path(path: str | Path) -> str | None:
    """'pipeline' | 'checkpoint' | 'run' | 'runs_dir' | 'prompts' | 'bundle', or None when unknown."""
    path = Path(path)
    if path.is_dir():
        if (path / "model_index.json").is_file():
            return "pipeline"
        if (path / "run.sqlite").is_file() or looks_like_run(path):
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

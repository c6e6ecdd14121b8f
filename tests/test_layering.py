"""The four layers stay apart: engine never imports Qt, gui never imports torch, record imports neither, and
analysis is numpy only (no torch, no Qt, neither the engine nor the GUI)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ghostviewer"
QT = {"PySide6", "pyqtgraph", "shiboken6"}
TORCH = {"torch", "diffusers", "transformers", "safetensors.torch", "accelerate"}


def _imports(folder: Path) -> set[tuple[str, str]]:
    found = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {(str(path.relative_to(PACKAGE)), alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add((str(path.relative_to(PACKAGE)), node.module))
    return found


def _offenders(folder: str, banned: set[str]) -> list[tuple[str, str]]:
    return sorted((f, m) for f, m in _imports(PACKAGE / folder) if any(m == b or m.startswith(b + ".") for b in banned))


def test_engine_never_imports_qt() -> None:
    assert _offenders("engine", QT) == []


def test_record_imports_neither_qt_nor_torch() -> None:
    assert _offenders("record", QT | TORCH) == []


def test_analysis_is_numpy_only() -> None:
    assert _offenders("analysis", QT | TORCH | {"ghostviewer.engine", "ghostviewer.gui", "ghostviewer.api"}) == []


def test_gui_never_imports_torch() -> None:
    assert _offenders("gui", TORCH) == []
    engine_side = {"ghostviewer.engine.run.runner", "ghostviewer.engine.loading.pipelines", "ghostviewer.api"}
    assert _offenders("gui", engine_side) == []


@pytest.mark.parametrize(
    ("module", "banned"),
    [
        ("ghostviewer.record", {"torch", "diffusers"} | QT),
        ("ghostviewer.analysis.compare", {"torch", "diffusers"} | QT),
        ("ghostviewer.engine.run.runner", QT),
        ("ghostviewer.gui.app", {"torch", "diffusers", "transformers"}),
    ],
)
def test_importing_a_layer_does_not_load_the_banned_ones(module: str, banned: set[str]) -> None:
    code = (
        f"import sys, {module}; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{sorted(b.split('.')[0] for b in banned)!r}); print(','.join(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"{module} pulled in {proc.stdout.strip()}"

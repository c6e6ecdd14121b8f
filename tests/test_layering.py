"""What a layer loads at run time: importing it must not pull in the banned libraries, however indirectly. The
static rule (who may import whom) is the import-linter contracts in pyproject.toml (tests/test_contracts.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ghostviewer"
QT = {"PySide6", "pyqtgraph", "shiboken6"}
TORCH = {"torch", "diffusers", "transformers", "accelerate"}
EVERY_MODULE = ("import importlib, pkgutil\n"
                "for m in pkgutil.walk_packages({0}.__path__, '{0}.'): importlib.import_module(m.name)\n")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "banned", "every_module"),
    [
        ("ghostviewer.record", TORCH | QT, True),
        ("ghostviewer.analysis", TORCH | QT, True),
        ("ghostviewer.spec", TORCH | QT | {"numpy", "PIL", "safetensors"}, True),
        ("ghostviewer.engine.run.runner", QT, False),
        ("ghostviewer.gui.app", TORCH, False),
    ],
)
def test_importing_a_layer_does_not_load_the_banned_ones(module: str, banned: set[str], every_module: bool) -> None:
    also = EVERY_MODULE.format(module) if every_module else ""
    code = (
        f"import sys, {module}\n{also}bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{sorted(banned)!r}); print(','.join(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"{module} pulled in {proc.stdout.strip()}"


def test_no_torch_flavoured_safetensors_outside_the_engine() -> None:
    """import-linter forbids external packages only whole (safetensors is fine, safetensors.torch is not)."""
    found = []
    for folder in ("record", "analysis", "gui", "spec"):
        for path in (PACKAGE / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                found += [f"{path.relative_to(PACKAGE)}: {n}" for n in names if n.startswith("safetensors.torch")]
    assert found == []

"""What a layer loads at run time: importing it must not pull in the banned libraries, however indirectly. The
static rule (who may import whom) is the import-linter contracts in pyproject.toml (tests/test_contracts.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ghostviewer"
QT = {"PySide6", "pyqtgraph", "shiboken6"}
TORCH = {"torch", "diffusers", "transformers", "accelerate"}
EVERY_MODULE = ("import importlib, pkgutil\n"
                "for m in pkgutil.walk_packages({0}.__path__, '{0}.'): importlib.import_module(m.name)\n")


# In one fresh interpreter, in this order: each layer's banned set contains the next ones', so a banned module found
# loaded after importing a layer was loaded by that layer (the ones before it were checked without it).
TORCH_FREE = (
    ("ghostviewer.spec", TORCH | QT | {"numpy", "PIL", "safetensors"}, True),
    ("ghostviewer.record", TORCH | QT, True),
    ("ghostviewer.analysis", TORCH | QT, True),
)  # ghostviewer.gui.app and a window made and shown, without TORCH: tests/gui/test_gui_boundary.py


def _loaded_banned(layers: tuple[tuple[str, set[str], bool], ...]) -> dict[str, str]:
    """Import the layers one after another in a fresh interpreter (every submodule where asked); after each, the
    banned libraries then loaded: {layer: "lib,lib"}."""
    code = "import gc\ngc.disable()\nimport importlib, json, pkgutil, sys\nfound = {}\n"  # no collections: cheaper
    for module, banned, every_module in layers:
        code += f"import {module}\n" + (EVERY_MODULE.format(module) if every_module else "")
        code += (f"found[{module!r}] = ','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
                 f"{sorted(banned)!r}))\n")
    proc = subprocess.run([sys.executable, "-c", code + "print(json.dumps(found))"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_importing_the_torch_free_layers_does_not_load_the_banned_ones() -> None:
    found = _loaded_banned(TORCH_FREE)
    assert found == {module: "" for module, _, _ in TORCH_FREE}, f"pulled in: {found}"


@pytest.mark.slow
def test_importing_the_runner_does_not_load_qt() -> None:
    found = _loaded_banned((("ghostviewer.engine.run.runner", QT, False),))
    assert found == {"ghostviewer.engine.run.runner": ""}, f"pulled in: {found}"


def test_no_torch_flavoured_safetensors_outside_the_engine() -> None:
    """import-linter forbids external packages only whole (safetensors is fine, safetensors.torch is not)."""
    found = []
    for folder in ("record", "analysis", "gui", "spec"):
        for path in (PACKAGE / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if "safetensors" not in text:  # no import of it to parse for
                continue
            for node in ast.walk(ast.parse(text)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                found += [f"{path.relative_to(PACKAGE)}: {n}" for n in names if n.startswith("safetensors.torch")]
    assert found == []

"""scripts/kill_test.py loaded as a module, for the suite's short kill tests (the script is not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "kill_test.py"


def kill_test() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kill_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

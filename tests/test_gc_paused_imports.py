"""ghostviewer/gc_paused_imports.py: the collector is paused while an engine module executes, resumed after it, and
the import that brings diffusers in is frozen only in GhostViewer's own processes (here a stand-in package and a
stand-in "diffusers", in this process: the finder is the same one `import ghostviewer` installs)."""

from __future__ import annotations

import gc
import importlib
import inspect
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import ghostviewer
from ghostviewer import gc_paused_imports
from ghostviewer.gc_paused_imports import EngineImports


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh package `gvpause_<n>` whose modules note whether the collector ran while they executed; its
    `heavy` module imports a fresh stand-in for diffusers."""
    name = f"gvpause_{uuid.uuid4().hex[:8]}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("import gc\nSEEN = [gc.isenabled()]\n")
    (root / "light.py").write_text("import gc\nSEEN = [gc.isenabled()]\n\ndef where():\n    return 'light'\n")
    heavy = f"import gc\nimport {name}_marker\nfrom {name} import light\nSEEN = [gc.isenabled()]\n"
    (root / "heavy.py").write_text(heavy)
    (tmp_path / f"{name}_marker.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = EngineImports(prefix=name, frozen_after=f"{name}_marker")
    sys.meta_path.insert(0, finder)
    monkeypatch.setattr(gc_paused_imports, "_OWN_PROCESS", [False])
    try:
        yield name
    finally:
        sys.meta_path.remove(finder)
        for key in [k for k in sys.modules if k.startswith(name)]:
            del sys.modules[key]


def test_import_ghostviewer_installs_one_finder_and_the_engine_loads_through_it() -> None:
    gc_paused_imports.install()  # again: nothing more
    engine = f"{ghostviewer.__name__}.engine"
    finders = [f for f in sys.meta_path if isinstance(f, EngineImports) and f.prefix == engine]
    assert len(finders) == 1
    import ghostviewer.engine.errors as errors

    assert type(errors.__loader__).__name__ == "_PausedLoader" and errors.__spec__.origin.endswith("errors.py")


def test_the_collector_is_paused_inside_and_resumed_after(package: str) -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()  # the suite's own freeze after collection (tests/conftest.py)
    heavy = importlib.import_module(f"{package}.heavy")
    light = sys.modules[f"{package}.light"]
    assert heavy.SEEN == [False] and light.SEEN == [False] and sys.modules[package].SEEN == [False]
    assert gc.isenabled()  # the outermost module resumed it (the nested one did not, early)
    assert "def where" in inspect.getsource(light.where)  # the loader passes the rest through
    assert light.__spec__.origin.endswith("light.py") and light.where() == "light"
    assert gc.get_freeze_count() == frozen  # not GhostViewer's own process: nothing more frozen


def test_a_collector_the_caller_disabled_stays_disabled(package: str) -> None:
    gc.disable()
    try:
        importlib.import_module(f"{package}.light")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_own_process_freezes_once_when_the_marker_comes_in(package: str) -> None:
    gc_paused_imports.own_process()
    before = gc.get_freeze_count()
    importlib.import_module(f"{package}.light")  # the marker not imported yet: no freeze
    assert gc.get_freeze_count() == before
    importlib.import_module(f"{package}.heavy")
    frozen = gc.get_freeze_count()
    assert frozen > before and gc.isenabled()
    del sys.modules[f"{package}.light"]
    importlib.import_module(f"{package}.light")  # later engine imports only pause: a user's objects stay free
    assert gc.get_freeze_count() == frozen


def test_a_failing_module_still_resumes_the_collector(package: str, tmp_path: Path) -> None:
    (tmp_path / package / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(RuntimeError, match="boom"):
        importlib.import_module(f"{package}.broken")
    assert gc.isenabled()

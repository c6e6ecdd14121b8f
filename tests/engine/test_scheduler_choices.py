"""Only schedulers that can run here are offered; one that needs a missing package is refused in one line."""

from __future__ import annotations

import pytest

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.devices import resolve_dtype
from ghostviewer.engine.loading.schedulers import SCHEDULERS, available_schedulers, missing_package, set_scheduler


def test_offered_schedulers_are_the_ones_whose_packages_are_here() -> None:
    offered = available_schedulers()
    assert "ddim" in offered and "euler" in offered
    for short in SCHEDULERS:
        assert (short in offered) == (missing_package(short) is None)


def test_a_scheduler_without_its_package_is_refused_naming_it(demo_loaded) -> None:
    missing = [short for short in SCHEDULERS if missing_package(short)]
    if not missing:
        pytest.skip("every optional scheduler package is installed here")
    with pytest.raises(GhostError, match=f"needs the {missing_package(missing[0])} package"):
        set_scheduler(demo_loaded.pipe, missing[0])


def test_a_dtype_spec_naming_a_component_twice_is_refused() -> None:
    with pytest.raises(GhostError, match="names vae twice"):
        resolve_dtype("float32,vae=float16,vae=float32", "cpu")

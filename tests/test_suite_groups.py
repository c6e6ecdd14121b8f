"""The parallel suite keeps its groups: under `--dist loadgroup` a test that shares a module fixture runs on the
worker its whole file runs on, because its node id carries the group. pytest 9 with pytest-xdist 3.8 drops the
groups without a word (the fixture is then rebuilt on every worker, timing-sensitive tests race); this test says so."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def shared_value() -> int:
    return 7


def test_a_test_sharing_a_module_fixture_is_in_its_files_group(request: pytest.FixtureRequest,
                                                               shared_value: int) -> None:
    marks = [mark.args[0] for mark in request.node.iter_markers("xdist_group")]
    assert marks == ["tests/test_suite_groups.py"] and shared_value == 7
    if request.config.getoption("dist", "no") == "loadgroup":
        assert request.node.nodeid.endswith("@tests/test_suite_groups.py"), request.node.nodeid

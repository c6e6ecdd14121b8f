"""A sweep refuses a pipeline that is not there before it reads its list (a 100,000-row list takes seconds to
check): with a list that is broken too, the error is the pipeline's, and nothing is recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer import api
from ghostviewer.engine.errors import GhostError


@pytest.mark.parametrize("source", ["missing", "not-a-pipeline"])
def test_the_pipeline_is_checked_before_the_list(tmp_path: Path, source: str) -> None:
    listing = tmp_path / "rows.jsonl"
    listing.write_text('{"prompt": "a red circle"}\n{"prompt": \n', encoding="utf-8")  # line 2 is broken
    (tmp_path / "not-a-pipeline").mkdir()
    runs = tmp_path / "runs"
    with pytest.raises(GhostError) as info:
        api.sweep(listing, "0-1", source=str(tmp_path / source), runs_dir=runs)
    message = str(info.value)
    assert ("no such pipeline" in message if source == "missing" else "no model_index.json" in message)
    assert "rows.jsonl" not in message and not runs.exists()
    with pytest.raises(GhostError, match="rows.jsonl"):  # the list's own error, once the pipeline is there
        api.sweep(listing, "0-1", source="demo", runs_dir=runs)

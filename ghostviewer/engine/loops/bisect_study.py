"""What both bisections (by blocks, bisect_blocks.py; by settings, bisect_settings.py) do around their search: the
bad run's symptom to look for, and the end of the study (its status and summary)."""

from __future__ import annotations

from typing import Any

from ghostviewer.analysis.symptom import Symptom
from ghostviewer.engine.errors import GhostError
from ghostviewer.record import RunRecord, StudyWriter


def bad_symptom(record: RunRecord) -> Symptom:
    """The bad run's first failure (never an earlier warning; a drift with the baseline it was judged by)."""
    symptom = Symptom.of_record(record)
    if symptom is None:
        raise GhostError("nothing to bisect: the run is healthy")
    return symptom


def finish_bisection(study: StudyWriter, status: str, result: dict[str, Any], summary: str) -> None:
    """Close the study with the result and its summary; a cancelled bisection's result says so."""
    if status == "cancelled":
        result["status"] = "cancelled"
    study.finish(status, result=result | {"summary": summary})

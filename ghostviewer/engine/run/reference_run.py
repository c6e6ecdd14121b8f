"""The same call on a known-good pipeline, side by side with the suspect's (`run --reference SRC`).

The reference runs the suspect's settings as they ran (seed, steps, guidance, size, scheduler) into the same runs
folder, unjudged by any baseline; analysis/reference.py then names the first output where the suspect leaves the
reference's range, and by how much. The result is the run's `reference` field.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ghostviewer.analysis.baseline_store import recorded_channel_means
from ghostviewer.analysis.reference import earliest, first_departure, persistent_departure
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.record import RecordError, RunRecord
from ghostviewer.spec import RunSpec


def compare_with_reference(result: dict[str, Any], reference: LoadedPipeline, runs_dir: Path) -> dict[str, Any]:
    """Run the suspect run's recorded settings on `reference` and set the two side by side:
    {"source", "run_dir", "verdict", "first_departure": {"phase", "step", "module", "stat", "ratio", …} | None,
    "summary"}."""
    from ghostviewer.engine.run.runner import execute_run

    try:
        suspect = RunRecord(result["run_dir"])
    except RecordError as exc:
        raise GhostError(str(exc)) from None
    spec = RunSpec.from_record(dict(suspect.settings))
    spec = replace(spec, source=reference.source, device=reference.device, faults=())  # known-good: no ghost lab
    ran = execute_run(reference, spec, runs_dir, baseline=None)
    try:
        good = RunRecord(ran["run_dir"])
    except RecordError as exc:
        raise GhostError(str(exc)) from None
    rows, good_rows = suspect.stats(), good.stats()
    departure = earliest([first_departure(rows, good_rows, recorded_channel_means(suspect),
                                          recorded_channel_means(good)),
                          persistent_departure(rows, good_rows)], rows)
    if departure is None:
        summary = f"stays within the reference's range ({reference.source}) at every traced output"
    else:
        where = f"step {departure['step']}" if departure["step"] is not None else departure["phase"]
        summary = (f"leaves the reference's range first at {departure['module']} ({where}): {departure['stat']} "
                   f"{_by(departure)}")
    return {"source": reference.source, "run_dir": ran["run_dir"], "verdict": ran["verdict"],
            "first_departure": departure, "summary": summary}


def _by(departure: dict[str, Any]) -> str:
    if departure["stat"].endswith("(persistent)"):
        return f"×{departure['ratio']:.3g} the reference's over the steps (limit ×{departure['limit']} either way)"
    if departure.get("unit"):
        return f"moved {departure['ratio']:.2f} reference std (limit {departure['limit']})"
    if departure["stat"] in ("nan", "inf"):
        return "non-finite where the reference is finite"
    return f"×{departure['ratio']:.3g} the reference's (limit ×{departure['limit']} either way)"

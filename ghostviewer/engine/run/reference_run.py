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


def compare_with_reference(result: dict[str, Any], reference: LoadedPipeline, runs_dir: Path,
                           suspect: LoadedPipeline | None = None) -> dict[str, Any]:
    """Run the suspect run's recorded settings on `reference` and set the two side by side:
    {"source", "run_dir", "verdict", "first_departure": {"phase", "step", "module", "stat", "ratio", …} | None,
    "summary", "by"}. With `suspect` (the pipeline the run was made with), its call is also made once more with the
    reference's modules in lockstep on the same inputs (reference_lockstep.py): where a module of its own departs
    is the first departure ("by": "same inputs"); else the side-by-side runs' ("by": "side by side", also
    `side_by_side` whichever is chosen)."""
    from ghostviewer.engine.run.runner import execute_run

    try:
        record = RunRecord(result["run_dir"])
    except RecordError as exc:
        raise GhostError(str(exc)) from None
    recorded = RunSpec.from_record(dict(record.settings))
    spec = replace(recorded, source=reference.source, device=reference.device, faults=())  # known-good: no ghost lab
    ran = execute_run(reference, spec, runs_dir, baseline=None)
    try:
        good = RunRecord(ran["run_dir"])
    except RecordError as exc:
        raise GhostError(str(exc)) from None
    rows, good_rows = record.stats(), good.stats()
    departure = earliest([first_departure(rows, good_rows, recorded_channel_means(record),
                                          recorded_channel_means(good)),
                          persistent_departure(rows, good_rows)], rows)
    side_by_side, by = departure, "side by side"
    lockstep = suspect is not None and not recorded.adapters  # a LoRA run's call is execute_run's alone
    if lockstep:
        from ghostviewer.engine.run.reference_lockstep import lockstep_call

        twins = lockstep_call(suspect, reference, replace(recorded, source=suspect.source, device=suspect.device))
        same_input = twins.first()
        if same_input is not None:
            departure, by = same_input, "same inputs"
        elif departure is not None and departure["module"] in twins.compared:
            # That module gave the reference's own output on the suspect's inputs: its side-by-side difference was
            # handed to it by the trajectory (float noise grown over the steps), not made by it — no departure.
            departure = None
    if departure is None:
        summary = f"stays within the reference's range ({reference.source}) at every traced output"
    else:
        where = f"step {departure['step']}" if departure["step"] is not None else departure["phase"]
        summary = (f"leaves the reference's range first at {departure['module']} ({where}): {departure['stat']} "
                   f"{_by(departure)}")
    return {"source": reference.source, "run_dir": ran["run_dir"], "verdict": ran["verdict"],
            "first_departure": departure, "summary": summary, "by": by if departure is not None else None,
            "side_by_side": side_by_side, "same_inputs": lockstep}


def _healthy(record: RunRecord) -> bool:
    return (record.verdict or {}).get("label", "ok") == "ok" and record.first_anomaly is None


def suspect_of(run_a: str | Path, run_b: str | Path) -> tuple[str, Path]:
    """Which of two runs to set beside the reference: B, unless A looks bad (a verdict or a first anomaly) and B
    healthy. ("a" | "b", its folder)."""
    try:
        a, b = RunRecord(run_a), RunRecord(run_b)
    except RecordError as exc:
        raise GhostError(str(exc)) from None
    return ("a", Path(run_a)) if not _healthy(a) and _healthy(b) else ("b", Path(run_b))


def compare_runs_with_reference(run_a: str | Path, run_b: str | Path, reference: LoadedPipeline,
                                runs_dir: Path | None = None, suspect: LoadedPipeline | None = None
                                ) -> dict[str, Any]:
    """`compare A B --reference SRC`: the suspect of the two (suspect_of) re-run on `reference` with its exact call,
    as `run --reference` does; compare_with_reference's dict with "suspect" ("a" | "b") and "suspect_run". The
    reference's run goes to `runs_dir`, by default beside the suspect's. `suspect`: the suspect run's pipeline,
    loaded (the same-inputs comparison; without it, side by side only)."""
    which, folder = suspect_of(run_a, run_b)
    side = compare_with_reference({"run_dir": str(folder)}, reference, runs_dir or folder.parent, suspect)
    return {"suspect": which, "suspect_run": str(folder), **side}


def _by(departure: dict[str, Any]) -> str:
    if departure["stat"].startswith("same-input"):
        what = "one channel's mean moved" if "channel" in departure["stat"] else "its output differs by"
        unit = "reference std" if departure.get("unit") == "reference std" else "(relative L2)"
        return (f"on the same inputs as the reference's module, {what} {departure['ratio']:.3g} {unit}; the "
                f"component's typical module {departure['typical']:.2g} (limit {departure['limit']:.2g})")
    if departure["stat"].endswith("(persistent)"):
        return f"×{departure['ratio']:.3g} the reference's over the steps (limit ×{departure['limit']} either way)"
    if departure.get("unit"):
        return f"moved {departure['ratio']:.2f} reference std (limit {departure['limit']})"
    if departure["stat"] in ("nan", "inf"):
        return "non-finite where the reference is finite"
    return f"×{departure['ratio']:.3g} the reference's (limit ×{departure['limit']} either way)"

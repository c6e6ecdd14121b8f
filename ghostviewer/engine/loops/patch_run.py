"""patch_run: re-run a bad run with one block's output patched in from a good reference run, in one process.

What a reference is. A run whose output of the block is taken as the block's healthy output. It is only
meaningful when it computes the same thing as the bad run except for the fault: the same prompt, seed, steps,
size and guidance (so the block is called the same number of times with same-shaped outputs). By default it is
the bad run's own settings without its ghost-lab faults — the known cause removed, everything else equal. A
user may name a good run instead (for example the float32 twin of a float16 failure); its settings are used
as recorded. A bad run with no fault to remove and no good run named has no sensible reference: patching is
then refused with a message saying so, rather than patched from something unrelated.

What the result means. `healthy: true` says: had this block produced the reference's output, the bad run would
have come out healthy. Patching the culprit from a reference that differs from the bad run only by the fault
makes the rest of the run compute what the reference computed, so it is a confirmation of "the failure starts
at this block's output", not a test of the block on its own inputs. `symptom` says whether the bad run's own
symptom is still there (analysis.symptom): a patch can remove the symptom and still leave a different failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ghostviewer.analysis.symptom import Symptom
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.interventions.base import RunContext, applied
from ghostviewer.engine.interventions.patch import Patch, PatchCapture, PatchConfig
from ghostviewer.engine.loops.bisect_trials import ProgressFn, Trials, quiet
from ghostviewer.engine.loops.recorded import PipelineCache, open_recorded
from ghostviewer.record import StudyWriter
from ghostviewer.spec import RunSpec


def default_reference(settings: RunSpec) -> tuple[RunSpec | None, str]:
    """The bad run's settings without its faults, with a note; None (and why) when it has none to remove."""
    if not settings.faults:
        return None, (
            "no reference to patch from: the run has no ghost-lab fault to remove, so no run is known to compute "
            "this block's healthy output (name a good run of the same prompt and seed to patch from it)"
        )
    return replace(settings, faults=()), f"the same settings without the fault(s) {', '.join(settings.faults)}"


def resolve_reference(settings: RunSpec, reference: RunSpec | str | Path | None) -> tuple[RunSpec, str]:
    """The reference's settings and a description; GhostError when there is no sensible one."""
    if isinstance(reference, RunSpec):
        return reference, "the given reference settings"
    if reference is not None:
        _record, good = open_recorded(reference)
        return good, f"the good run {Path(reference).name}"
    found, note = default_reference(settings)
    if found is None:
        raise GhostError(note)
    return found, note


@contextmanager
def hooked(intervention: Any, settings: RunSpec, loaded: Any) -> Iterator[None]:
    ctx = RunContext(loaded.pipe, settings.prompt, settings.negative_prompt, settings.seed, lambda: None)
    with applied([intervention], ctx):
        yield


def patch_with(
    trials: Trials, bad: RunSpec, module: str, reference: RunSpec, description: str
) -> dict[str, Any]:
    """The reference run (capturing), then the patched bad run; the patch result (module docstring)."""
    capture = PatchCapture(PatchConfig(module))
    ref = trials.run(
        reference, {"reference": module}, role="reference", note=f"reference for patching {module}: {description}",
        around=lambda loaded: hooked(capture, reference, loaded), describe={"reference_for": module},
    )
    if ref["symptom"] is not False:
        problem = "shows the bad run's symptom too" if ref["symptom"] else f"did not finish ({ref['verdict']})"
        raise GhostError(f"the reference run ({description}) {problem}: nothing healthy to patch {module} from")
    patch = Patch(PatchConfig(module), capture.outputs)
    tagged = replace(bad, extra={**bad.extra, "patch": {"module": module, "reference_run": ref["run_dir"]}})
    try:
        run = trials.run(
            tagged, {"patched": module}, role="patched", note=f"{module} patched from {ref['run_dir']}",
            around=lambda loaded: hooked(patch, tagged, loaded), describe={"patched": module},
        )
    finally:
        capture.outputs.clear()  # device memory goes back as soon as the patch is done
    return patch_result(module, run, ref["run_dir"], description, patch.calls, reruns=2)


def patch_result(module: str, run: dict[str, Any], reference_run_dir: str | None, reference: str, calls: int,
                 reruns: int) -> dict[str, Any]:
    """CONTRACT's `patching` dict of a patched re-run `run` (a Trials entry): where its healthy values came from."""
    return {
        "module": module,
        "healthy": run["healthy"],
        "symptom": run["symptom"],
        "verdict": run["verdict"],
        "first_anomaly": run["first_anomaly"],
        "run_dir": run["run_dir"],
        "reference_run_dir": reference_run_dir,
        "reference": reference,
        "calls_patched": calls,
        "reruns": reruns,
    }


def patch_run(
    bad_run_dir: str | Path,
    module: str,
    *,
    reference_settings: RunSpec | str | Path | None = None,
    pipeline: Any = None,
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    on_progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Re-run a bad run with `module`'s output patched from a reference (None: the bad run without its faults,
    or a good run folder, or RunSpec); {"module", "healthy", "symptom", "verdict", "first_anomaly", "run_dir",
    "reference_run_dir", "reference", "calls_patched"}. Both runs are recorded in a `bisect` study.
    """
    record, bad = open_recorded(bad_run_dir)
    symptom = Symptom.of_record(record)
    if symptom is None:
        raise GhostError("nothing to patch: the run is healthy")
    reference, description = resolve_reference(bad, reference_settings)
    study = StudyWriter.create(
        Path(runs_dir) if runs_dir else record.path.parent, "bisect",
        {"mode": "patch", "run_dir": str(record.path), "module": module, "reference": description},
    )
    with study:
        study.add_run(record.path, {"bad": record.run_id}, role="bad", summary=record.summary())
        trials = Trials(PipelineCache(pipeline=pipeline, allow_pickle=allow_pickle), study, symptom,
                        on_progress or quiet)
        result = {**patch_with(trials, bad, module, reference, description), "study_dir": str(study.path)}
        study.finish("done", result=result)
    return result

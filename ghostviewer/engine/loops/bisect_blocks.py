"""Bisection by bypass: from a failing run, the single bypassable block whose bypass makes its symptom go away.

"Narrow the faulty section by switching components off and watching which tensor turns abnormal first",
automated. The oracle is the bad run's own symptom, defined precisely in analysis.symptom: the bad verdict
label, or an output of the first anomaly's kind from its phase on (at or after the bypassed point); for a silent
ghost (a drift against the bad run's baseline) the drift where no bypass can have caused it — at the first-drift
module while it runs, else upstream of the first bypassed block — and not an off_prompt or color_cast label,
which a bypass alone can cause. A bypass that removes the symptom but leaves a different failure says "the
culprit is among these blocks"; it is not a healthy run, and the trail says so (`symptom` and `healthy` apart).
A re-run that crashes answers nothing (`symptom: null`) and is counted as "still failing": a crash is no
evidence that the bypass removed the fault, and the single-block confirmation keeps a wrong turn from naming a
culprit.

The search (analysis.bisect_plan): the candidates are the bypassable blocks that ran before the first anomaly
in its phase (or enclose it); each re-run bypasses blocks covering half of the possible culprits, coarse to
fine (components, blocks, sub-blocks), and keeps the half the answer points to. A single culprit among N
candidates is isolated in ⌈log2 N⌉ re-runs and confirmed by a run that bypasses it alone (skipped when the
trail already holds that run): at most ⌈log2 N⌉ + 1 re-runs, reported as `reruns` beside `budget`. When every
re-run came out healthy (bypassing half a model nearly always spoils the image), one more re-run, unchanged,
checks that the failure comes back at all; if it does not, `culprit` is null and `reason` says so. A drift is
not halved (analysis.bisect_plan says why): the suspect is the innermost bypassable block around the first-drift
module, bypassed alone once, then checked by patching; with no bypassable block around it, `culprit` is null.
When no bypass explains the failure — the first anomaly lies upstream of every bypassable block (an embedding,
the initial noise), or bypassing the last suspect alone does not remove the symptom — `culprit` is null and
`reason` names the first anomaly. A named culprit is then checked by activation patching when a reference
exists (engine.patching); otherwise `patching` is null and `patching_note` says why.

Everything is recorded as a `bisect` study: the bad run (role "bad", where it lies), each re-run ("trial"),
and the patching runs ("reference", "patched"). Progress goes to `on_progress` as small dicts, live.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ghostviewer.analysis.bisect_plan import budget, candidates, choose_half, covered, innermost, inside
from ghostviewer.analysis.symptom import Symptom, describe_anomaly
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops.bisect_trials import BisectionCancelled, ProgressFn, Trials, quiet
from ghostviewer.engine.loops.patch_run import default_reference, patch_with
from ghostviewer.engine.loops.recorded import PipelineCache, open_recorded
from ghostviewer.engine.run.runner import CancelToken
from ghostviewer.engine.tracing.blocks import discover_blocks
from ghostviewer.record import StudyWriter
from ghostviewer.spec import RunSpec
from ghostviewer.spec.bypass import BypassSpec


def _fully_bypassed(specs: tuple[str, ...]) -> list[str]:
    """Blocks the bad run itself bypassed at every step: they and their insides are not suspects."""
    parsed = [BypassSpec.parse(spec) for spec in specs]
    return [p.module for p in parsed if p.start is None and p.end is None]


def _upstream_reason(symptom: Symptom) -> str:
    if symptom.anomaly is None:
        return f"no bypassable block ran in this run, so no bypass can explain its {symptom.describe()}"
    anomaly = symptom.anomaly
    return (
        f"the first anomaly, {describe_anomaly(anomaly)}, comes before every bypassable block of its phase: the "
        f"fault is in {anomaly.get('module')} itself or upstream of every bypassable block (an embedding, the "
        "initial noise), so no bypass can remove it"
    )


def _not_single_reason(suspect: str, symptom: Symptom, suspects: list[str]) -> str:
    anomaly = symptom.anomaly
    module = str((anomaly or {}).get("module"))
    if anomaly is not None and not any(inside(module, block) for block in suspects):
        # Past every suspect (vae.decoder.conv_out, scheduler.step): bypassing what ran before it changed nothing.
        return (
            f"the first anomaly, {describe_anomaly(anomaly)}, lies in no bypassable block, and bypassing the "
            f"blocks that run before it does not remove it: the fault is most likely in {module} itself (or "
            "needs several blocks together)"
        )
    where = f"; the first anomaly is {describe_anomaly(anomaly)}" if anomaly else ""
    return (
        f"bypassing {suspect} alone does not remove the symptom, so no single bypassable block explains the "
        f"failure (it starts upstream of them, or needs several blocks together){where}"
    )


def _drift_reason(symptom: Symptom) -> str:
    module = (symptom.anomaly or {}).get("module")
    return (
        f"the first anomaly, {describe_anomaly(symptom.anomaly or {})}, is in {module}, which no bypassable block "
        "encloses: a bypass upstream of it changes its input, which can hide a drift or cause one, so no bypass "
        "can tell whether the fault is there"
    )


def _not_reproduced_reason(symptom: Symptom) -> str:
    return (
        f"every re-run was healthy, and the bad run re-run unchanged did not show its {symptom.describe()} either: "
        "the failure did not come back, so no block can be blamed (replay the run several times to see how often "
        "it fails; a loop of replays finds where the runs part)"
    )


def _try(trials: Trials, settings: RunSpec, blocks: list[str], study: StudyWriter, total: int) -> dict[str, Any]:
    trial = replace(settings, bypass=(*settings.bypass, *blocks))
    note = "bypassed " + ", ".join(blocks) if blocks else "unchanged: does the failure come back?"
    entry = trials.run(trial, {"bypassed": blocks}, note=note, describe={"bypassed": list(blocks)})
    study.set_progress(len(trials.trail()), total)
    return entry


def _search(
    trials: Trials, settings: RunSpec, suspects: list[str], study: StudyWriter, total: int
) -> tuple[str | None, str | None]:
    """(culprit, None) or (None, reason). Halving first, then the single-block confirmation."""
    symptom = trials.symptom
    if not suspects:
        return None, _upstream_reason(symptom)
    possible = list(suspects)
    if symptom.judges_drift:  # not halved (analysis.bisect_plan): the block around the first drift, alone
        around = [p for p in possible if symptom.hidden_by(p)]
        if not around:
            return None, _drift_reason(symptom)
        possible = [innermost(around)]
        trials.emit({"event": "narrowed", "trial": 0, "suspects": list(possible)})
    while len(possible) > 1:
        chosen = choose_half(possible)
        cover = covered(chosen, possible)
        entry = _try(trials, settings, chosen, study, total)
        possible = cover if entry["symptom"] is False else [p for p in possible if p not in cover]
        trials.emit({"event": "narrowed", "trial": len(trials.entries), "suspects": list(possible)})
    suspect = possible[0]
    alone = [e for e in trials.trail() if e["bypassed"] == [suspect] and e["symptom"] is False]
    if not alone and _try(trials, settings, [suspect], study, total)["symptom"] is not False:
        return None, _not_single_reason(suspect, symptom, suspects)
    trail = trials.trail()
    # Bypassing half a model nearly always spoils the image: re-runs that all come out healthy more likely mean
    # the failure does not come back at all. One re-run past the budget, unchanged, tells the two apart.
    if len(trail) >= 2 and all(e.get("healthy") for e in trail):
        if _try(trials, settings, [], study, total + 1)["symptom"] is False:
            return None, _not_reproduced_reason(symptom)
    return suspect, None


def _patching(trials: Trials, settings: RunSpec, culprit: str) -> dict[str, Any]:
    reference, note = default_reference(settings)
    if reference is None:
        return {"patching": None, "patching_note": note}
    try:
        return {"patching": patch_with(trials, settings, culprit, reference, note)}
    except GhostError as exc:
        return {"patching": None, "patching_note": str(exc)}


def bisect_run(
    run_dir: str | Path,
    *,
    pipeline: Any = None,
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    on_progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> dict[str, Any]:
    """CONTRACT's `bisect` dict: {"culprit", "reruns", "trail", "reason"?, "study_dir", ...} (module docstring).

    `pipeline`: a pipeline object in memory (with whatever the user patched into it) instead of the recorded
    source. `runs_dir`: where the study folder goes (default: beside the bad run).
    """
    record, settings = open_recorded(run_dir)
    if record.status != "done":
        raise GhostError(f"run {record.path.name} ended {record.status}: bisection needs a run that finished")
    symptom = Symptom.of_record(record)  # a drift comes with the baseline it was judged by
    if symptom is None:
        raise GhostError("nothing to bisect: the run is healthy")
    emit = on_progress or quiet
    cache = PipelineCache(pipeline=pipeline, allow_pickle=allow_pickle)
    bypassable = [b.module for b in discover_blocks(cache.get(settings).pipe) if b.bypassable]
    suspects = candidates(
        bypassable, record.modules(), record.stats(), record.first_anomaly, _fully_bypassed(settings.bypass)
    )
    total = budget(len(suspects))
    params = {"mode": "bypass", "run_dir": str(record.path), "candidates": suspects, "budget": total}
    study = StudyWriter.create(Path(runs_dir) if runs_dir else record.path.parent, "bisect", params, total=total)
    with study:
        study.add_run(record.path, {"bad": record.run_id}, role="bad", summary=record.summary())
        emit({"event": "bisect_started", "mode": "bypass", "run_dir": str(record.path), "study_dir": str(study.path),
              "symptom": symptom.describe(), "candidates": suspects, "budget": total})
        trials = Trials(cache, study, symptom, emit, cancel)
        status, extra = "done", {}
        try:
            culprit, reason = _search(trials, settings, suspects, study, total)
            if culprit is not None:
                extra = _patching(trials, settings, culprit)
        except BisectionCancelled:
            culprit, reason, status = None, "cancelled before the bisection ended", "cancelled"
        result: dict[str, Any] = {
            "culprit": culprit,
            "reruns": len(trials.trail()),
            "trail": trials.trail(),
            **({"reason": reason} if culprit is None else {}),
            "study_dir": str(study.path),
            "run_dir": str(record.path),
            "symptom": symptom.describe(),
            "candidates": len(suspects),
            "candidate_blocks": suspects,
            "budget": total,
            **extra,
        }
        if status == "cancelled":
            result["status"] = "cancelled"
        study.finish(status, result=result | {"summary": _summary(result)})
    emit({"event": "bisect_finished", **result})
    return result


def _summary(result: dict[str, Any]) -> str:
    if result["culprit"]:
        return f"culprit {result['culprit']} in {result['reruns']} re-runs (budget {result['budget']})"
    return f"no culprit after {result['reruns']} re-runs"


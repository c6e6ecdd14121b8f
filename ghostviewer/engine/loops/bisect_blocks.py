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

Time and users' faults (analysis.bisect_plan, "Time"). The first anomaly's own block and its parent are tried alone
before any halving. With the first anomaly at denoising step k > 0 every bypass is from step k (`MODULE@k:`,
`from_step` in the trail and the result), the blocks that ran only after the anomaly in its step left out. When
that finds no confirmed culprit, bypasses start from k − 1, then k − 2 (FALLBACK_STEPS; every block, since its
output at an earlier step feeds step k: a fault fed by the latents), and whole runs come only after that
(`searched_from` lists the starts in order; each trail entry has its `from_step`). A block named by a bypass that
reaches back before step k and that runs after the anomaly in its step is kept only when patching confirms it (else
`rejected_culprit` and a reason); patching then starts from the step its bypass started from. A suspect that
encloses bypassable blocks is split: when its inner blocks bypassed together remove the symptom, ddmin finds the
fewest that do, and two or more are "more than one block" (`culprit` null, `culprits` named). Without a fault-free
reference, the culprit is patched from the bad run's own step k − 1 (engine.loops.step_patch), or from the next
seed.

Everything is recorded as a `bisect` study: the bad run (role "bad", where it lies), each re-run ("trial"),
and the patching runs ("reference", "patched"). Progress goes to `on_progress` as small dicts, live.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ghostviewer.analysis.bisect_plan import (
    Forest,
    after_in_step,
    budget,
    candidates,
    choose_half,
    covered,
    enclosing,
    innermost,
    inside,
)
from ghostviewer.analysis.ddmin import ddmin
from ghostviewer.analysis.symptom import Symptom, describe_anomaly
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops.bisect_study import bad_symptom, finish_bisection
from ghostviewer.engine.loops.bisect_trials import BisectionCancelled, ProgressFn, Trials, quiet
from ghostviewer.engine.loops.patch_run import default_reference, patch_with
from ghostviewer.engine.loops.recorded import PipelineCache, open_recorded, recorded_call
from ghostviewer.engine.loops.step_patch import patch_from_step
from ghostviewer.engine.run.runner import CancelToken
from ghostviewer.engine.tracing.blocks import discover_blocks
from ghostviewer.engine.watch.user_hooks import hooks_hint
from ghostviewer.record import StudyWriter
from ghostviewer.spec import RunSpec
from ghostviewer.spec.bypass import BypassSpec

FALLBACK_STEPS = 2  # bypasses from k − 1 and k − 2 before whole runs: a fault fed by the previous steps' outputs


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


def _late_reason(block: str, symptom: Symptom, start: int | None) -> str:
    when = "at every step" if start is None else f"from step {start} on"
    return (
        f"bypassing {block} {when} removes the symptom, but {block} runs after the first anomaly, "
        f"{describe_anomaly(symptom.anomaly or {})}, in its step, and activation patching does not confirm it: the "
        "bypass most likely changed the trajectory before the failure, so it is not named"
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


def _specs(blocks: list[str], start: int | None) -> list[str]:
    return list(blocks) if start is None else [f"{block}@{start}:" for block in blocks]


def _try(trials: Trials, settings: RunSpec, blocks: list[str], study: StudyWriter, total: int,
         start: int | None = None) -> dict[str, Any]:
    for done in trials.trail():  # the same bypass asked again (ddmin, the confirmation) is answered by the trail
        if blocks and sorted(done["bypassed"]) == sorted(blocks) and done.get("from_step") == start:
            return done
    trial = replace(settings, bypass=(*settings.bypass, *_specs(blocks, start)))
    when = "" if start is None else f" from step {start}"
    note = "bypassed " + ", ".join(blocks) + when if blocks else "unchanged: does the failure come back?"
    describe: dict[str, Any] = {"bypassed": list(blocks), **({"from_step": start} if start is not None else {})}
    entry = trials.run(trial, dict(describe), note=note, describe=describe)
    study.set_progress(len(trials.trail()), total)
    return entry


def _halve(
    trials: Trials, settings: RunSpec, possible: list[str], first: list[str], start: int | None,
    study: StudyWriter, total: int, gone: list[list[str]],
) -> str | None:
    """The single suspect left by halving `possible` (bypassed from `start`), confirmed alone; None when it is
    not confirmed. The first anomaly's own block and its parent (`first`) are tried alone before any halving.
    Every bypass set that removed the symptom is appended to `gone` (for "more than one block")."""

    def removed(blocks: list[str]) -> bool:
        entry = _try(trials, settings, blocks, study, total, start)
        if entry["symptom"] is False:
            gone.append(list(blocks))
            return True
        return False

    tried: list[str] = []
    for block in first:
        if block not in possible or len(possible) <= 1:
            continue
        cover = covered([block], possible)
        if removed([block]):
            possible = [p for p in cover if p not in tried]
        else:
            possible = [p for p in possible if p not in cover]
        tried.append(block)
        trials.emit({"event": "narrowed", "trial": len(trials.entries), "suspects": list(possible)})
    while len(possible) > 1:
        chosen = choose_half(possible)
        cover = covered(chosen, possible)
        possible = cover if removed(chosen) else [p for p in possible if p not in cover]
        trials.emit({"event": "narrowed", "trial": len(trials.entries), "suspects": list(possible)})
    if not possible:
        return None
    return possible[0] if removed([possible[0]]) else None


def _several(
    trials: Trials, settings: RunSpec, gone: list[list[str]], pool: list[str], start: int | None,
    study: StudyWriter, total: int,
) -> list[str]:
    """The fewest blocks whose bypass together removes the symptom (ddmin), from the smallest bypass set seen
    to remove it; [] when none did."""
    if not gone:
        return []
    smallest = min(gone, key=lambda blocks: len(covered(blocks, pool)))
    inner = [p for p in covered(smallest, pool) if not any(q != p and inside(q, p) for q in covered(smallest, pool))]
    if len(inner) < 2:
        return list(smallest) if len(smallest) > 1 else []
    if sorted(inner) != sorted(smallest) and _try(trials, settings, inner, study, total, start)["symptom"] is not False:
        return list(smallest) if len(smallest) > 1 else []
    return ddmin(inner, lambda kept: _try(trials, settings, kept, study, total, start)["symptom"] is False)


def _inside_parent(
    trials: Trials, settings: RunSpec, suspect: str, blocks: list[str], start: int | None,
    study: StudyWriter, total: int,
) -> list[str]:
    """When the suspect encloses bypassable blocks that ran: are they, together, what bypassing it removes? Then
    the fewest of them that do (ddmin); else [suspect] (its own code). Blocks that run after the first anomaly
    count here: the same fault may sit on several layers, and they fire too."""
    forest = Forest([b for b in blocks if inside(b, suspect)])
    children = forest.children(suspect)
    if not children or _try(trials, settings, children, study, total, start)["symptom"] is not False:
        return [suspect]
    return ddmin(children, lambda kept: _try(trials, settings, kept, study, total, start)["symptom"] is False)


def _several_reason(blocks: list[str], start: int | None, symptom: Symptom) -> str:
    when = "" if start is None else f" from step {start} on"
    return (
        f"more than one block: bypassing {', '.join(blocks)} together{when} removes the symptom, and bypassing "
        f"fewer of them does not, so the fault is in each of them (the same change on several layers?); the "
        f"first anomaly is {describe_anomaly(symptom.anomaly or {})}"
    )


def _search(
    trials: Trials, settings: RunSpec, suspects: list[str], study: StudyWriter, total: int, after: set[str],
    blocks: list[str],
) -> tuple[str | None, str | None, dict[str, Any]]:
    """(culprit, None, extra) or (None, reason, extra). From the first anomaly's step first, then whole runs
    (analysis.bisect_plan, "Time"); halving, then the single-block confirmation; then "more than one block"."""
    symptom = trials.symptom
    if not suspects:
        return None, _upstream_reason(symptom), {}
    anomaly = symptom.anomaly or {}
    if symptom.judges_drift:  # not halved (analysis.bisect_plan): the block around the first drift, alone
        around = [p for p in suspects if symptom.hidden_by(p)]
        if not around:
            return None, _drift_reason(symptom), {}
        suspect = innermost(around)
        trials.emit({"event": "narrowed", "trial": 0, "suspects": [suspect]})
        if _try(trials, settings, [suspect], study, total)["symptom"] is not False:
            return None, _not_single_reason(suspect, symptom, suspects), {}
        return suspect, None, {}
    step = anomaly.get("step")
    first = enclosing(suspects, str(anomaly.get("module")))[:2]
    searches = _starts(_denoise_step(symptom), suspects, after)
    gone_by_start: list[tuple[int | None, list[str], list[list[str]]]] = []
    for index, (start, pool) in enumerate(searches):
        if index:  # the trail says how far back it went: each entry's from_step (absent: the whole run)
            trials.emit({"event": "fallback", "from_step": start, "trial": len(trials.entries)})
        gone: list[list[str]] = []
        suspect = _halve(trials, settings, pool, first, start, study, total, gone)
        gone_by_start.append((start, pool, gone))
        if suspect is None:
            continue
        extra: dict[str, Any] = {"from_step": start} if start is not None else {}
        narrowed = _inside_parent(trials, settings, suspect, blocks, start, study, total)
        if len(narrowed) > 1:
            return None, _several_reason(narrowed, start, symptom), {"culprits": narrowed, **extra}
        suspect = narrowed[0]
        if start != step and suspect in after:  # found by a bypass that reaches back before the anomaly's step
            extra["needs_patching"] = True
        trail = trials.trail()
        # Bypassing half a model nearly always spoils the image: re-runs that all come out healthy more likely
        # mean the failure does not come back at all. One re-run past the budget, unchanged, tells the two apart.
        if len(trail) >= 2 and all(e.get("healthy") for e in trail):
            if _try(trials, settings, [], study, total + 1)["symptom"] is False:
                return None, _not_reproduced_reason(symptom), {}
        return suspect, None, extra
    for start, pool, gone in gone_by_start:
        several = _several(trials, settings, gone, pool, start, study, total)
        if len(several) > 1:
            return None, _several_reason(several, start, symptom), {"culprits": several, "from_step": start}
        if len(several) == 1:
            late = {"needs_patching": True} if start != step and several[0] in after else {}
            return several[0], None, {"from_step": start, **late} if start is not None else late
    last = trials.trail()[-1]["bypassed"] if trials.trail() else suspects[:1]
    return None, _not_single_reason(last[0] if last else suspects[0], symptom, suspects), {}


def _starts(step: Any, suspects: list[str], after: set[str]) -> list[tuple[int | None, list[str]]]:
    """The steps bypasses start from, in order, each with its pool of suspects: the first anomaly's step k (the
    blocks that ran after the anomaly in step k left out), then k − 1 … k − FALLBACK_STEPS (every block: its output
    of an earlier step feeds step k), then whole runs (None)."""
    if not isinstance(step, int) or step <= 0:
        return [(None, suspects)]
    starts: list[tuple[int | None, list[str]]] = [(step, [s for s in suspects if s not in after])]
    starts += [(start, suspects) for start in range(step - 1, max(step - FALLBACK_STEPS, 1) - 1, -1)]
    return [*starts, (None, suspects)]


def _denoise_step(symptom: Symptom) -> int | None:
    anomaly = symptom.anomaly or {}
    return anomaly.get("step") if anomaly.get("phase") == "denoise" and not symptom.judges_drift else None


def _patching(trials: Trials, settings: RunSpec, culprit: str, rows: list[Any],
              from_step: int | None = None) -> dict[str, Any]:
    """Activation patching of the culprit: from the fault-free settings (ghost-lab faults), else from the bad
    run's own healthy step (the step before the one its bypass started from, or before the first anomaly's step
    k > 0), else from the same settings with the next seed."""
    reference, note = default_reference(settings)
    anomaly = trials.symptom.anomaly or {}
    step = from_step if from_step is not None else anomaly.get("step")
    try:
        if reference is not None:
            return {"patching": patch_with(trials, settings, culprit, reference, note)}
        if anomaly.get("phase") == "denoise" and isinstance(step, int) and step > 0:
            return {"patching": patch_from_step(trials, settings, culprit, rows, step)}
        other = replace(settings, seed=int(settings.seed) + 1)
        return {"patching": patch_with(trials, settings, culprit, other,
                                       f"the same settings with seed {other.seed} (no fault-free run is known)")}
    except GhostError as exc:
        return {"patching": None, "patching_note": f"not confirmed by patching: {exc}"}


def _confirmed(patching: dict[str, Any]) -> bool:
    found = patching.get("patching")
    return bool(found) and found.get("symptom") is False


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
    symptom = bad_symptom(record)
    emit = on_progress or quiet
    cache = PipelineCache(pipeline=pipeline, allow_pickle=allow_pickle, call=recorded_call(record))
    bypassable = [b.module for b in discover_blocks(cache.get(settings).pipe) if b.bypassable]
    rows = record.stats()
    suspects = candidates(bypassable, record.modules(), rows, symptom.anomaly, _fully_bypassed(settings.bypass))
    ran = [m for m in record.modules() if m in set(bypassable)]
    after = after_in_step(rows, symptom.anomaly) if symptom.anomaly else set()
    # one pass's bound: ⌈log2 N⌉ + 1, and the first anomaly's own block and parent tried alone before halving
    total = budget(len(suspects)) + len(enclosing(suspects, str((symptom.anomaly or {}).get("module")))[:2])
    params = {"mode": "bypass", "run_dir": str(record.path), "candidates": suspects, "budget": total}
    study = StudyWriter.create(Path(runs_dir) if runs_dir else record.path.parent, "bisect", params, total=total)
    with study:
        study.add_run(record.path, {"bad": record.run_id}, role="bad", summary=record.summary())
        emit({"event": "bisect_started", "mode": "bypass", "run_dir": str(record.path), "study_dir": str(study.path),
              "symptom": symptom.describe(), "candidates": suspects, "budget": total})
        trials = Trials(cache, study, symptom, emit, cancel)
        status, extra = "done", {}
        try:
            culprit, reason, found = _search(trials, settings, suspects, study, total, after, ran)
            if culprit is not None:
                extra = _patching(trials, settings, culprit, rows, found.get("from_step"))
                if found.pop("needs_patching", False) and not _confirmed(extra):
                    reason = _late_reason(culprit, symptom, found.get("from_step"))
                    extra["rejected_culprit"], culprit = culprit, None
            extra.update(found)
        except BisectionCancelled:
            culprit, reason, status = None, "cancelled before the bisection ended", "cancelled"
        hint = hooks_hint(record.call) if pipeline is None and reason == _not_reproduced_reason(symptom) else ""
        if hint:
            reason = f"{reason}; {hint}"
        result: dict[str, Any] = {
            "culprit": culprit,
            "reruns": len(trials.trail()),
            "trail": trials.trail(),
            **({"reason": reason} if culprit is None else {}),
            "study_dir": str(study.path),
            "run_dir": str(record.path),
            "symptom": symptom.describe(),
            "first_warning": symptom.warning,
            "candidates": len(suspects),
            "candidate_blocks": suspects,
            "budget": total,
            "searched_from": [s for s, _pool in _starts(_denoise_step(symptom), suspects, after)],
            **extra,
        }
        finish_bisection(study, status, result, _summary(result))
    emit({"event": "bisect_finished", **result})
    return result


def _summary(result: dict[str, Any]) -> str:
    if result["culprit"]:
        return f"culprit {result['culprit']} in {result['reruns']} re-runs (budget {result['budget']})"
    return f"no culprit after {result['reruns']} re-runs"


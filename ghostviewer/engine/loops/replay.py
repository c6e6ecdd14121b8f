"""Replay loops: re-run a recorded run N times with exactly its settings and compare every re-run with the
original, output by output (fingerprints and statistics), step by step.

"If the same seed does not reproduce the error, suspect external factors: run it in a loop." A replay is a
`replay` study: the original (role "original", referenced where it lies) and each re-run (role "replay",
written inside the study folder). The first divergence is the earliest in execution order over all re-runs
that differ; the report also says which environment settings (threads, determinism flags, versions) differ.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ghostviewer.analysis.compare import compare_runs
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.loras import _sha256
from ghostviewer.engine.loops.recorded import PipelineCache, open_recorded, recorded_call
from ghostviewer.engine.run.runner import CancelToken, RunFailed
from ghostviewer.engine.watch.user_hooks import hooks_hint
from ghostviewer.record import StudyWriter
from ghostviewer.record.types import PHASE_ORDER

MAX_TIMES = 10_000
ProgressFn = Callable[[dict[str, Any]], None]


def _earliest(a: dict[str, Any], b: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """The divergence that comes first in execution order (by module position, then phase/step)."""
    def rank(d: dict[str, Any]) -> tuple[int, int, int]:
        module = d.get("module")
        position = order.index(module) if module in order else len(order)
        step = d.get("step")
        return (PHASE_ORDER.get(str(d.get("phase")), 3), -1 if step is None else int(step), position)

    return a if rank(a) <= rank(b) else b


def refuse_changed_loras(environment: dict[str, Any]) -> None:
    """Refuse, in one line, the replay of a run whose LoRA file now holds other bytes than the run loaded.

    Refused rather than warned: a replay answers "do the same inputs give the same output?", and a LoRA changed
    since is another input. Run anyway, its divergence would read as "not reproduced" (exit 1) — blaming
    nondeterminism for an edited file, the very confusion a reproducibility tool exists to remove — and a warning
    above that verdict is easy to miss in CI. A missing file is left to the run's own check (one line too)."""
    for lora in environment.get("loras") or []:
        path, recorded = Path(str(lora.get("file", ""))), lora.get("sha256")
        if not recorded or not path.is_file():
            continue
        now = _sha256(path, f"--lora {path}")
        if now != recorded:
            raise GhostError(f"the LoRA {path} changed since this run was recorded (sha256 {recorded[:12]}… then, "
                             f"{now[:12]}… now): a replay would load other weights and could not tell whether the "
                             "run reproduces; put the recorded file back, or make a new run with this one")


def replay_run(
    run_dir: str | Path,
    times: int = 1,
    *,
    pipeline: Any = None,
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    on_progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> dict[str, Any]:
    """CONTRACT's `replay` dict: {"reproduced", "times", "first_divergence", ...}, recorded as a study.

    `pipeline`: a pipeline object in memory (whatever the user patched into it) instead of reloading the
    recorded source. `runs_dir`: where the study folder goes (default: beside the original run).
    """
    if not isinstance(times, int) or isinstance(times, bool) or not 1 <= times <= MAX_TIMES:
        raise GhostError(f"--times must be between 1 and {MAX_TIMES}, not {times!r}")
    record, settings = open_recorded(run_dir)
    refuse_changed_loras(record.environment)
    call = recorded_call(record)  # a watched run: its call is re-issued, as it was made
    cache = PipelineCache(pipeline=pipeline, allow_pickle=allow_pickle, call=call)
    loaded = cache.get(settings)
    emit = on_progress or (lambda _event: None)
    study = StudyWriter.create(
        Path(runs_dir) if runs_dir else record.path.parent,
        "replay",
        {"original": str(record.path), "times": times, "seed": settings.seed},
        total=times,
    )
    with study:
        study.add_run(record.path, {"original": record.run_id}, role="original", summary=record.summary())
        order = record.modules()
        runs: list[dict[str, Any]] = []
        first: dict[str, Any] | None = None
        environment_diff: dict[str, Any] = {}
        for index in range(1, times + 1):
            emit({"event": "replay", "run": index, "times": times})
            try:
                result = cache.execute(loaded, settings, study.runs_dir, cancel)
            except RunFailed as exc:
                result = {"run_dir": str(exc.run_dir), "status": "failed", "error": str(exc)}
            check = compare_runs(record.path, result["run_dir"])
            divergence = check["first_divergence"]
            if divergence is not None:
                tagged = {"run": index, **divergence}
                first = tagged if first is None else _earliest(first, tagged, order)
            environment_diff.update(check["environment_diff"])
            entry = {
                "run": index,
                "run_dir": result["run_dir"],
                "reproduced": divergence is None,
                "first_divergence": divergence,
                "verdict": (result.get("verdict") or {}).get("label"),
            }
            runs.append(entry)
            study.add_run(result["run_dir"], {"replay": index}, role="replay", summary=result,
                          note="bit-identical" if divergence is None else f"diverged: {divergence.get('what')}")
            study.set_progress(index)
            emit({"event": "replayed", **entry, "times": times})
            if result.get("status") == "cancelled":
                break
        same = sum(1 for r in runs if r["reproduced"])
        report = {
            "reproduced": first is None and len(runs) == times,
            "times": times,
            "first_divergence": first,
            "reproduced_runs": same,
            "original": str(record.path),
            "seed": settings.seed,
            "environment_diff": environment_diff,
            "runs": runs,
            "study_dir": str(study.path),
            "summary": f"reproduced {same}/{len(runs)}",
        }
        if call is not None:
            report["reissued"] = True  # the watched call made again, keyword for keyword
            report["left_out"] = call.left_out  # what the record could not keep: the re-issued call lacks it
            if call.left_out:
                report["summary"] += f" (re-issued without {', '.join(call.left_out)}: not recorded)"
            hint = hooks_hint(record.call) if pipeline is None and same < len(runs) else ""
            if hint:
                report["user_hooks"] = record.call["user_hooks"]
                report["summary"] += f"; {hint}"
        status = "done" if len(runs) == times else "cancelled"
        study.finish(status, result=report)
    return report

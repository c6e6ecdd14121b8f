"""One re-run of a bisection (a trial): run it, judge it against the bad run's symptom, record it in the study.

Bisection by bypass, settings bisection and activation patching all do the same thing per re-run, so they share
this: pipelines come from one PipelineCache (loaded once per source, device and dtype), every run goes into the
study's own runs folder, and each trial is reported to `on_progress` as it starts, step by step and when done,
so a GUI can draw the trail live.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from ghostviewer.analysis.anomaly import recorded_latent_sigma
from ghostviewer.analysis.baseline_store import recorded_channel_means
from ghostviewer.analysis.symptom import Symptom, is_healthy, verdict_label
from ghostviewer.engine.loops.recorded import PipelineCache
from ghostviewer.engine.run.runner import CancelToken, RunFailed
from ghostviewer.record import RecordError, RunRecord, StudyWriter
from ghostviewer.spec import RunSpec
from ghostviewer.spec.bypass import BypassSpec, BypassSpecError

ProgressFn = Callable[[dict[str, Any]], None]


def quiet(_event: dict[str, Any]) -> None:
    return None


class BisectionCancelled(Exception):
    """A trial came back cancelled (the user's cancel token): the loop stops where it is."""


@dataclass
class Trials:
    cache: PipelineCache
    study: StudyWriter
    symptom: Symptom
    emit: ProgressFn = quiet
    cancel: CancelToken | None = None
    entries: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (role, trail entry)

    def run(
        self,
        settings: RunSpec,
        key: dict[str, Any],
        *,
        role: str = "trial",
        note: str = "",
        around: Callable[[Any], AbstractContextManager[Any]] | None = None,
        describe: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run `settings` once; the trail entry {**describe, verdict, first_anomaly, run_dir, symptom, healthy}.

        `around(loaded)`: a context (hooks to add, e.g. a patch) kept open for the duration of the run.
        """
        index = len(self.entries) + 1
        head = {"trial": index, "role": role, **(describe or {})}
        self.emit({"event": "trial_started", **head})
        loaded = self.cache.get(settings)

        def forward(event: dict[str, Any]) -> None:
            if event.get("event") == "step":
                self.emit({"event": "trial_step", "trial": index, "step": event["step"], "steps": event["steps"]})

        with (around or (lambda _loaded: nullcontext()))(loaded):
            try:  # judged by the bad run's baseline when it had one (the same key: only bypasses differ)
                result = self.cache.execute(loaded, settings, self.study.runs_dir, self.cancel, forward,
                                            baseline=self.symptom.baseline or "auto")
            except RunFailed as exc:
                result = {"run_dir": str(exc.run_dir), "status": "failed", "error": str(exc)}
        status = str(result.get("status") or "done")
        verdict, anomaly = result.get("verdict"), result.get("first_anomaly")
        rows, means, sigma = _recorded(result["run_dir"], self.symptom.judges_drift)
        shown = self.symptom.shown_by(verdict, anomaly, rows, status, bypassed=_bypassed(settings),
                                      channel_means=means, latent_sigma=sigma)
        entry = {
            **(describe or {}),
            "verdict": verdict_label(verdict) or status,
            "first_anomaly": anomaly,
            "run_dir": result["run_dir"],
            "symptom": shown,
            "healthy": status == "done" and is_healthy(verdict, anomaly),
        }
        if result.get("error"):
            entry["error"] = result["error"]
        self.study.add_run(result["run_dir"], {"trial": index, **key}, role=role, summary=result, note=note)
        self.entries.append((role, entry))
        self.emit({"event": "trial", **head, **entry})
        if status == "cancelled":
            raise BisectionCancelled()
        return entry

    def trail(self, role: str = "trial") -> list[dict[str, Any]]:
        """The re-runs of one role, in order: "trial" is the bisection's own (patching runs are apart)."""
        return [entry for kind, entry in self.entries if kind == role]


def _bypassed(settings: RunSpec) -> list[str]:
    """The blocks a run bypasses (at some step or all): drift at or after them is the bypass's own doing."""
    found = []
    for spec in settings.bypass:
        try:
            found.append(BypassSpec.parse(spec).module)
        except BypassSpecError:
            continue
    return found


def _recorded(run_dir: str, channels: bool) -> tuple[list[Any], dict[tuple[str, str], Any], float | None]:
    """A re-run's rows (execution order), when a drift is judged its per-channel means of encode/decode outputs
    keyed (phase, module), and its scheduler's init_noise_sigma; nothing when the record cannot be read."""
    try:
        record = RunRecord(run_dir)
        rows = record.stats()
        sigma = recorded_latent_sigma(record.environment)
    except RecordError:
        return [], {}, None
    return rows, (recorded_channel_means(record) if channels else {}), sigma

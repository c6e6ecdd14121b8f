"""Sweep statistics from a sweep study's record alone (no torch): failure rates per prompt and per seed, counts
by verdict and by first-anomaly module.

A run fails when its verdict is not `ok`, when it has a first anomaly (the CLI's rule: exit 1), or when the
pipeline itself raised (status `failed`). Cancelled runs are not counted: a resumed sweep runs them again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ghostviewer.record import StudyRecord


def is_failure(verdict: str | None, first_anomaly: Mapping[str, Any] | None, status: str | None = None) -> bool:
    """The one failure rule of sweeps, the CLI and the gallery."""
    if status == "failed":
        return True
    return (verdict is not None and verdict != "ok") or bool(first_anomaly)


def verdict_of(run: Mapping[str, Any]) -> str | None:
    """The label of a CONTRACT run dict's verdict (a dict with 'label', a label, or None)."""
    verdict = run.get("verdict")
    if isinstance(verdict, Mapping):
        label = verdict.get("label")
        return None if label is None else str(label)
    return None if verdict is None else str(verdict)


@dataclass
class _Tally:
    failed: int = 0
    total: int = 0

    @property
    def rate(self) -> float:
        return self.failed / self.total if self.total else 0.0


@dataclass
class SweepStats:
    """Counts over a sweep's runs, added one by one (`add`) or read from a study (`from_study`)."""

    total: int = 0
    failed: int = 0
    by_prompt: dict[str, _Tally] = field(default_factory=dict)
    by_seed: dict[int, _Tally] = field(default_factory=dict)
    verdicts: Counter[str] = field(default_factory=Counter)
    anomaly_modules: Counter[str] = field(default_factory=Counter)

    def add(self, prompt: str, seed: int, verdict: str | None, first_anomaly: Mapping[str, Any] | None,
            status: str | None = None) -> bool:
        """Count one run; returns whether it failed."""
        if status == "cancelled":
            return False
        bad = is_failure(verdict, first_anomaly, status)
        self.total += 1
        self.failed += bad
        for table, key in ((self.by_prompt, prompt), (self.by_seed, seed)):
            tally = table.setdefault(key, _Tally())  # type: ignore[arg-type]
            tally.total += 1
            tally.failed += bad
        self.verdicts[verdict or status or "unknown"] += 1
        if first_anomaly and first_anomaly.get("module"):
            self.anomaly_modules[str(first_anomaly["module"])] += 1
        return bad

    def add_run(self, run: Mapping[str, Any]) -> bool:
        """Count a CONTRACT run dict."""
        return self.add(str(run.get("prompt", "")), int(run.get("seed") or 0), verdict_of(run),
                        run.get("first_anomaly"), run.get("status"))

    # -- results ---------------------------------------------------------------------------------------
    @property
    def rate(self) -> float:
        return self.failed / self.total if self.total else 0.0

    def failure_rate(self) -> dict[str, float]:
        """{prompt: rate} in the order the prompts were first seen."""
        return {prompt: round(t.rate, 6) for prompt, t in self.by_prompt.items()}

    def failure_rate_by_seed(self) -> dict[str, float]:
        """{str(seed): rate}, seeds in ascending order (JSON keys are strings)."""
        return {str(seed): round(self.by_seed[seed].rate, 6) for seed in sorted(self.by_seed)}

    def table(self, by: str) -> list[tuple[Any, int, int, float]]:
        """Rows (prompt or seed, failed, total, rate) for the gallery's failure-rate table."""
        source = self.by_prompt if by == "prompt" else self.by_seed
        keys = list(source) if by == "prompt" else sorted(source)
        return [(k, source[k].failed, source[k].total, source[k].rate) for k in keys]  # type: ignore[index]

    def summary(self) -> str:
        """A few words for the history: 'failure rate 10 % (3/30)'."""
        return f"failure rate {100 * self.rate:.0f} % ({self.failed}/{self.total})"

    def to_json(self) -> dict[str, Any]:
        return {
            "failure_rate": self.failure_rate(),
            "failure_rate_by_seed": self.failure_rate_by_seed(),
            "failed": self.failed,
            "total": self.total,
            "verdicts": dict(self.verdicts),
            "first_anomaly_modules": dict(self.anomaly_modules.most_common()),
            "summary": self.summary(),
        }

    # -- from records ----------------------------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: Iterable[tuple[Mapping[str, Any], str | None, Mapping[str, Any] | None, str | None]]
                  ) -> SweepStats:
        """From (key, verdict, first_anomaly, status) rows; keys hold 'prompt' and 'seed'."""
        stats = cls()
        for key, verdict, anomaly, status in rows:
            stats.add(str(key.get("prompt", "")), int(key.get("seed") or 0), verdict, anomaly, status)
        return stats

    @classmethod
    def from_study(cls, study: StudyRecord | str | Path) -> SweepStats:
        record = study if isinstance(study, StudyRecord) else StudyRecord(study)
        return cls.from_rows(
            (r.key if isinstance(r.key, Mapping) else {}, r.verdict, r.first_anomaly, r.status)
            for r in record.runs() if r.role == "member"
        )

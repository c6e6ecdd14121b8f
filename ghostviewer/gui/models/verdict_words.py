"""The one vocabulary for what became of a run, used by the verdict badge, the runs history (runs and a study's
runs), the sweep gallery's thumbnails and its tooltips: the verdict label; "ok · KIND" when the image passed but
something inside did not (a drift, an overflow: counted as a failure by sweeps and the CLI); or the run's status
(running, incomplete, cancelled, failed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def run_words(status: str | None, verdict: str | None, first_anomaly: Mapping[str, Any] | None) -> str:
    """What became of a finished (or stopped) run, in the words every view uses."""
    if status in ("failed", "cancelled"):
        return status
    if status in ("running", "interrupted"):
        return "incomplete"
    if verdict == "ok" and first_anomaly:
        return f"ok · {first_anomaly.get('kind') or 'anomaly'}"
    return verdict or status or "-"


def short_words(words: str) -> str:
    """The part that matters when there is room for one word: "ok · drift" -> "drift"."""
    return words.split(" · ", 1)[1] if words.startswith("ok · ") else words

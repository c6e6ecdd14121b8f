"""Which watched calls keep their whole record (tail sampling): every call is recorded, judged, and summed up in the
watch study; the policy decides, once the verdict is known, whether its full record stays.

`keep`: "all" | "anomalies" (a bad verdict, an anomaly, a failed call) | N (every Nth call, plus every anomalous
one). `ring=K`: the last K healthy records stay besides the anomalous ones (older healthy ones are deleted).
`max_bytes`: the kept records' disk use is capped, the oldest healthy ones going first, then the oldest anomalous
ones (the newest record always stays).
"""

from __future__ import annotations

import shutil
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ghostviewer.engine.errors import GhostError


def anomalous(summary: dict[str, Any]) -> bool:
    verdict = summary.get("verdict") or {}
    return (summary.get("status") not in (None, "done") or summary.get("first_anomaly") is not None
            or verdict.get("label") not in (None, "ok"))


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@dataclass
class KeepPolicy:
    keep: str | int = "all"
    ring: int | None = None
    max_bytes: int | None = None
    _healthy: deque[tuple[Path, int]] = field(default_factory=deque)  # kept healthy records, oldest first
    _anomalous: deque[tuple[Path, int]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        keep = self.keep
        if isinstance(keep, bool) or not (keep in ("all", "anomalies") or (isinstance(keep, int) and keep >= 1)):
            raise GhostError(f"keep must be 'all', 'anomalies' or a whole number N ≥ 1 (every Nth call), not {keep!r}")
        for name in ("ring", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise GhostError(f"{name} must be a whole number ≥ 0 or None, not {value!r}")

    @property
    def writes_as_it_goes(self) -> bool:
        """Whether a call's record is written during the call (a flight record) or at its end, once judged: a
        process killed mid-call then leaves nothing of that call."""
        return self.keep == "all" and self.ring is None

    @property
    def drops_unwritten(self) -> bool:
        """Whether a call the policy does not want is judged first and never written (no ring to fill)."""
        return self.keep != "all" and self.ring is None

    def wants(self, index: int, summary: dict[str, Any]) -> bool:
        """Whether call number `index` (0-based) keeps its full record."""
        if anomalous(summary):
            return True
        if self.keep == "all" or (self.keep == "anomalies" and self.ring is not None):
            return True  # the ring then trims the healthy ones
        return isinstance(self.keep, int) and index % self.keep == 0

    def kept(self, run_dir: Path, summary: dict[str, Any]) -> list[Path]:
        """Note a kept record; returns the records deleted to honour `ring` and `max_bytes`."""
        entry = (run_dir, folder_bytes(run_dir) if self.max_bytes is not None else 0)
        (self._anomalous if anomalous(summary) else self._healthy).append(entry)
        evicted: list[Path] = []
        if self.ring is not None:
            while len(self._healthy) > self.ring:
                evicted.append(self._healthy.popleft()[0])
        if self.max_bytes is not None:
            while self._total() > self.max_bytes and len(self._healthy) + len(self._anomalous) > 1:
                queue = self._healthy if self._healthy else self._anomalous
                if queue[0][0] == run_dir:  # the newest stays
                    queue = self._anomalous if queue is self._healthy and self._anomalous else queue
                    if queue[0][0] == run_dir:
                        break
                evicted.append(queue.popleft()[0])
        for path in evicted:
            shutil.rmtree(path, ignore_errors=True)
        return evicted

    def _total(self) -> int:
        return sum(size for _, size in self._healthy) + sum(size for _, size in self._anomalous)

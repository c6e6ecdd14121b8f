"""The Bisection trail says from which step the bypasses started: each re-run's `from_step` beside its blocks,
and the starts in the order they ran under the result ("searched from step 4, then 3") — the result dict as
engine.loops.bisect_blocks writes it for a fault first seen at step 4 that bypasses from step 4 did not explain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui.coordinators.bisect_coordinator import BisectCoordinator
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.bisect_trail import BisectTrail, searched_text

BLOCK = "unet.mid_block.resnets.0"


class Engine(QObject):
    sigError = Signal(dict)
    sigEngineDied = Signal(str)

    def send(self, cmd: str, **fields: Any) -> int:
        return 1


class Scheduler(QObject):
    stateChanged = Signal(str)
    engine_state = "ready"


def _trial(n: int, from_step: int | None, symptom: bool) -> dict[str, Any]:
    return {"trial": n, "role": "trial", "bypassed": [BLOCK], "verdict": "nan" if symptom else "ok",
            "symptom": symptom, "healthy": not symptom, "first_anomaly": None, "run_dir": f"/runs/trial-{n}",
            **({"from_step": from_step} if from_step is not None else {})}


def test_the_trail_draws_the_steps_its_bypasses_started_from(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    coordinator = BisectCoordinator(Engine(), Scheduler(), TimelineModel(), BlockModel(), HistoryModel(tmp_path),
                                    ErrorReporter(dialogs=False))
    view = BisectTrail(coordinator)
    qtbot.addWidget(view)
    coordinator.show_result({
        "culprit": BLOCK, "reruns": 2, "trail": [_trial(1, 4, True), _trial(2, 3, False)], "run_dir": "/runs/bad",
        "study_dir": "/runs/study", "symptom": f"nan at {BLOCK}", "candidates": 3, "budget": 6,
        "searched_from": [4, 3, 2, None], "from_step": 3,
    })
    assert view.table.item(0, 1).text().endswith("from step 4")
    assert view.table.item(1, 1).text().endswith("from step 3")
    assert "searched from step 4, then 3." in view.result.text()


def test_the_words_for_whole_runs_and_for_no_step() -> None:
    from ghostviewer.gui.coordinators.bisect_coordinator import entry_from

    trail = [entry_from(_trial(1, 5, True), 1), entry_from(_trial(2, None, False), 2)]
    assert searched_text(trail, None) == "searched from step 5, then the whole run"
    assert searched_text([entry_from(_trial(1, None, True), 1)], None) == ""  # whole runs only: nothing to say
    assert searched_text([], {"searched_from": [2, 1, None]}) == "searched from step 2, then 1, then the whole run"

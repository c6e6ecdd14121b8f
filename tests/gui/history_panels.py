"""A Runs history panel on its own, shown and asked to read its folder: what the many-runs tests look at."""

from __future__ import annotations

from pathlib import Path

from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.widgets.history_panel import HistoryPanel


def shown_history(qtbot, folder: Path, size: tuple[int, int] = (700, 320)) -> tuple[HistoryModel, HistoryPanel]:  # noqa: ANN001
    """The model and its panel, shown at `size`, its read of `folder` started (not waited for)."""
    model = HistoryModel(folder)
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    panel.resize(*size)
    panel.show()
    qtbot.waitExposed(panel)
    model.refresh()
    return model, panel

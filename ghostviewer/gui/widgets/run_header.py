"""One line above the images saying which run is shown: prompt, seed, steps, scheduler, run folder."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from ghostviewer.gui.models.timeline_model import TimelineModel


class RunHeader(QLabel):
    def __init__(self, model: TimelineModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setContentsMargins(6, 2, 6, 2)
        model.runChanged.connect(self._update)
        model.statusChanged.connect(self._update)
        self._update()

    def _update(self) -> None:
        record, s = self.model.record, self.model.settings
        if record is None:
            self.setText("<i>No run shown — press Run (Ctrl+Enter), or pick one in the runs history.</i>")
            self.setToolTip("")
            return
        prompt = html.escape(str(s.get("prompt") or ""))
        details = [f"seed {s.get('seed')}", f"{s.get('steps')} steps", f"guidance {s.get('guidance')}"]
        if s.get("scheduler"):
            details.append(str(s.get("scheduler")))
        if s.get("faults"):
            details.append("ghost: " + ", ".join(map(str, s.get("faults") or [])))
        anomaly = record.first_anomaly if self.model.status != "running" else None
        where = ""
        if anomaly:
            step = "" if anomaly.get("step") is None else f" step {anomaly.get('step')}"
            where = (f"<br><span style='color:#c62828'>first anomaly: {html.escape(str(anomaly.get('kind')))}"
                     f" in {html.escape(str(anomaly.get('module')))} ({anomaly.get('phase')}{step})</span>")
        self.setText(f"<b>“{prompt}”</b> &nbsp;·&nbsp; {html.escape(' · '.join(details))}"
                     f" &nbsp;<span style='color:#888'>{html.escape(record.run_id)}</span>{where}")
        self.setToolTip(str(record.path))

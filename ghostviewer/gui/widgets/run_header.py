"""One line above the images saying which run is shown: prompt, what the run changed in the pipeline (ghost,
bypasses, captures — never silently, and first, so a narrow window cuts the run folder, not them), seed, steps,
scheduler, the call's kind and batch when not a text-to-image call of one image, run folder; and its first anomaly
below (naming the image of a batch it is in, when it is in one only)."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from ghostviewer.gui.models.prompt_model import intervention_words
from ghostviewer.gui.models.timeline_model import TimelineModel, anomaly_words

WARN = "#ef6c00"
BAD = "#c62828"


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
        if s.get("kind") and s.get("kind") != "text2img":
            details.append(str(s["kind"]))
        batch = s.get("batch") if isinstance(s.get("batch"), int) else 1
        if batch > 1:
            details.append(f"batch {batch}")
        changed = intervention_words(s)
        changed_html = (f" &nbsp;<b style='color:{WARN}'>[{html.escape(' · '.join(changed))}]</b>"
                        if changed else "")
        anomaly = record.first_anomaly if self.model.status != "running" else None
        sample = anomaly.get("sample") if anomaly else None
        which = f" in image {sample + 1} of {batch}" if isinstance(sample, int) and batch > 1 else ""
        where = (f"<br><span style='color:{BAD}'>first anomaly{which}: {html.escape(anomaly_words(anomaly))}</span>"
                 if anomaly else "")
        self.setText(f"<b>“{prompt}”</b>{changed_html} &nbsp;·&nbsp; {html.escape(' · '.join(details))}"
                     f" &nbsp;<span style='color:#888'>{html.escape(record.run_id)}</span>{where}")
        bypass = "\n".join(f"bypass {b}" for b in s.get("bypass") or [])
        capture = "\n".join(f"capture {c}" for c in s.get("capture") or [])
        self.setToolTip("\n".join(t for t in (str(record.path), bypass, capture) if t))

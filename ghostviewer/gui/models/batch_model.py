"""BatchModel: the shown run's samples when it made more than one image, and which of them is selected — the sample
the image views describe. Read on the GUI's Worker (gui/link/worker.py) once per run and status; a run of one
image has none (count 0) and its views stay as they always were."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui.data.batch_images import NO_BATCH, STEP_DATA_SAMPLE, Batch, Sample, read_batch
from ghostviewer.gui.models.run_read import RunRead
from ghostviewer.gui.models.timeline_model import TimelineModel


class BatchModel(QObject):
    batchChanged = Signal()  # another run, or the same run's samples read again (its status changed)
    sampleSelected = Signal(int)  # the batch index the views describe

    def __init__(self, timeline: TimelineModel, synchronous: bool = False, parent: QObject | None = None) -> None:
        super().__init__(parent or timeline)
        self.timeline = timeline
        self.batch: Batch = NO_BATCH
        self.selected = 0
        self._reader = RunRead(timeline, read_batch, "reading the batch's images", synchronous, parent=self)
        self._reader.cleared.connect(self._on_cleared)
        self._reader.answered.connect(self._on_batch)
        self._reader.read()

    @property
    def loading(self) -> bool:
        return self._reader.loading

    @property
    def count(self) -> int:
        return self.batch.count

    @property
    def sample(self) -> Sample | None:
        """The selected sample (None for a run of one image)."""
        return self.batch.samples[self.selected] if self.selected < self.count else None

    @property
    def step_data_is_selected(self) -> bool:
        """Every step view shows the selected sample's own data: a run of one image, or a batch's first sample (the
        step images and the on-demand decode show every sample's where recorded)."""
        return self.count == 0 or self.selected == STEP_DATA_SAMPLE

    @property
    def maps_sample(self) -> int:
        """The sample whose feature and attention maps the record keeps: a captured output keeps its last batch
        item (engine/tracing/tracer.py, attention_capture.py; under classifier-free guidance the prompt-conditioned
        half of the last image), so a batch's maps are its last image's. -1 for a run of one image."""
        return self.count - 1 if self.count > 1 else -1

    def maps_note(self, what: str) -> str:
        """Whose `what` ("feature maps", "attention maps") the views show, in words ("" for a run of one image):
        the selected image's own, or plainly another's when the record keeps only that one's."""
        if self.maps_sample < 0:
            return ""
        kept = self.maps_sample + 1
        if self.selected == self.maps_sample:
            return f"{what} of image {kept} of {self.count} (the record keeps image {kept}'s only)"
        return f"{what}: image {kept}'s, not image {self.selected + 1}'s (only image {kept}'s are recorded)"

    def select(self, index: int) -> None:
        index = max(0, min(int(index), max(self.count - 1, 0)))
        if index != self.selected:
            self.selected = index
            self.sampleSelected.emit(index)

    def _on_cleared(self) -> None:
        self._set(NO_BATCH, new_run=True)

    def _on_batch(self, batch: Any) -> None:
        if isinstance(batch, Exception):  # a bug of ours (the log has it)
            batch = Batch(problem=f"the batch cannot be read: {batch}")
        self._set(batch, new_run=False)

    def _set(self, batch: Batch, new_run: bool) -> None:
        self.batch = batch
        if new_run or self.selected >= max(batch.count, 1):
            if self.selected != 0:
                self.selected = 0
                self.sampleSelected.emit(0)
        self.batchChanged.emit()

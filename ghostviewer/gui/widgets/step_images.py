"""The images of the selected step: latent channels (colour-mapped), the cheap previews of x_t and of the
predicted x0, a full VAE decode when asked for, and the final image. Bound to StepDataModel (the step) and
TimelineModel (the run's final image, read on a Worker once per run and status). A step or final image
the record cannot give (a garbage tensor file, an image outside the run's folder) is one line under the panes.

A batch (BatchModel): the panes show the selected sample's final image and, at each step, its own latents, x0 and
previews (step_data.sample_step). A record made before those were kept has the first sample's only: while another
sample is selected the step panes stay empty and say why rather than show the first sample's tensors as its. The
on-demand VAE decode is the selected sample's (the engine decodes that image's latents: decode_name's
`_sample_K` image, read here on a Worker)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QWidget

from ghostviewer.gui import messages
from ghostviewer.gui.data.batch_images import STEP_DATA_SAMPLE, final_name
from ghostviewer.gui.data.step_data import (
    NO_STEP,
    NON_FINITE_RGBA,
    StepData,
    channel_mosaic,
    read_rgb,
    sample_step,
)
from ghostviewer.gui.dialogs.error_reporter import one_line
from ghostviewer.gui.link.worker import Worker
from ghostviewer.gui.models.batch_model import BatchModel
from ghostviewer.gui.models.step_data_model import ShownStep, StepDataModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.image_pane import ImagePane
from ghostviewer.record import RecordError, RunRecord

PANES = ("latents", "x_t preview", "predicted x₀", "VAE decode", "final image")
# (row, column, rowspan): latents large on the left, the four RGB views in a 2×2 grid beside it
PLACES = {"latents": (0, 0, 2), "x_t preview": (0, 1, 1), "predicted x₀": (0, 2, 1), "VAE decode": (1, 1, 1),
          "final image": (1, 2, 1)}
LATENT_COLORMAP = "CET-D1"


STEP_PANES = PANES[:4]
ONLY_FIRST = "no step tensors for image {shown} of {count} (the record keeps image {first}'s) · statistics: whole batch"
DECODE_NONE = "VAE decode (none yet)"
DECODE_TITLE = "VAE decode · step {step}"
SAMPLE_DECODE_TITLE = "decode · image {shown}"  # a batch's other image: whose decode it is (the pane is small)


def decode_image_name(step: int, sample: int) -> str:
    """The name of the on-demand decode of a batch's image `sample` in the record (engine/server.py decode_name)."""
    return f"step_{step:04d}_decoded" + (f"_sample_{sample}" if sample else "")


def read_decode(record: RunRecord, step: int, sample: int) -> np.ndarray | None:
    """The on-demand decode of image `sample` at `step`, None when none was made (a worker thread calls this)."""
    try:
        return read_rgb(record.image_path(decode_image_name(step, sample)))
    except RecordError:
        return None


def read_final(record: RunRecord, name: str = "final") -> tuple[np.ndarray | None, str]:
    """The run's final image (`final_1`…: a batch's others), or None and why ("" when none is recorded); a worker
    thread calls this."""
    try:
        path = record.image_path(name)
    except RecordError as exc:  # e.g. it points outside the run's folder
        return None, messages.FINAL_REFUSED.format(message=one_line(exc))
    image = read_rgb(path)
    if image is None and path is not None:
        return None, messages.FINAL_UNREADABLE.format(path=path.relative_to(record.path.resolve()))
    return image, ""


class StepImages(QWidget):
    def __init__(self, model: TimelineModel, data: StepDataModel, batch: BatchModel | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model, self.data, self.batch = model, data, batch
        self.lut = pg.colormap.get(LATENT_COLORMAP).getLookupTable(nPts=256, alpha=False)
        data.mosaic_lut = self.lut  # the latents coloured where they are read, off the GUI thread
        self.panes = {name: ImagePane(name) for name in PANES}
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(1)
        for name, (row, col, span) in PLACES.items():
            grid.addWidget(self.panes[name], row, col, span, 1)
        self.message = QLabel()  # what the record could not give: one line, the whole of it in the tooltip
        self.message.setStyleSheet("color: #e0a000; padding: 2px 6px")
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)  # never widens the window
        self.message.hide()
        grid.addWidget(self.message, 2, 0, 1, 3)
        grid.setColumnStretch(0, 2)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(2, 1)
        self._final_for: tuple[str, str, int, int] | None = None  # (run folder, status, sample, batch) asked for
        self.final_loading = False
        self.final_problem = ""  # why the final image is not shown ("" when it is, or none is recorded)
        self.shown: StepData = NO_STEP  # the step drawn now
        self._final_reader = Worker(1, latest=True, what="reading the final image", parent=self)
        self._decode_for: tuple[str, int, int, int] | None = None  # (run, step, version, sample) of a batch's other
        self.decoded: np.ndarray | None = None  # image's decode, read for that key (None: none made yet)
        self.decode_loading = False
        self._decode_reader = Worker(1, latest=True, what="reading the image's decode", parent=self)
        self._decode_reader.answered.connect(self._on_decode)
        self._final_reader.answered.connect(self._on_final)
        model.runChanged.connect(self._show_final)
        model.statusChanged.connect(self._show_final)
        self._show_final()
        self.shown_step = ShownStep(self, data, lambda: self._show_step(self.shown_step.data))  # on screen only
        if batch is not None:
            batch.sampleSelected.connect(self._on_sample)
            batch.batchChanged.connect(self._on_sample)

    @property
    def sample(self) -> int:
        """The batch index the panes describe (0 for a run of one image)."""
        return self.batch.selected if self.batch is not None and self.batch.count > 1 else 0

    @property
    def step_panes_hidden(self) -> bool:
        """Another sample than the first is selected and the shown step has latents of the first only (a record made
        before every sample's were kept)."""
        view = self.shown
        return (self.sample != STEP_DATA_SAMPLE and not view.empty and view.latents is not None
                and sample_step(view, self.sample) is None)

    def _on_sample(self, *_args: object) -> None:
        self._show_step(self.shown)
        self._show_final()

    @property
    def items(self) -> dict[str, pg.ImageItem]:
        return {name: pane.item for name, pane in self.panes.items()}

    def _set(self, name: str, image: np.ndarray | None, title: str | None = None) -> None:
        if name == "latents" and image is not None and self.batch is not None and self.batch.count > 1:
            # a batch: whose step tensors these are (the first pane only: the small ones have no room for it)
            title = f"{title or name} · image {self.sample + 1} of {self.batch.count}"
        self.panes[name].set_image(image, title)

    def _say(self) -> None:
        """The line under the panes: the shown step's and the final image's problems."""
        step = messages.STEP_UNREADABLE.format(step=self.shown.step, message=one_line(self.shown.error))
        problems = [step] if self.shown.error else []
        problems += [self.final_problem] if self.final_problem else []
        if self.step_panes_hidden and self.batch is not None:
            problems.insert(0, ONLY_FIRST.format(shown=self.sample + 1, count=self.batch.count,
                                                 first=STEP_DATA_SAMPLE + 1))
        text = " · ".join(problems)
        self.message.setText(text)
        self.message.setToolTip(text)
        self.message.setVisible(bool(text))

    def _show_step(self, view: StepData) -> None:
        self.shown = view
        self._say()
        if view.empty:
            for name in STEP_PANES:
                self._set(name, None)
            return
        if self.step_panes_hidden:
            for name in STEP_PANES:  # the small panes have room for one word
                self._set(name, None, f"latents · image {self.sample + 1}: not recorded" if name == "latents"
                          else f"{name} · none")
            return
        first = self.sample == STEP_DATA_SAMPLE
        if not first:
            view = sample_step(view, self.sample) or view  # the step's own tensors of the selected sample
        if view.latents is not None:
            mosaic, limit = view.latents_mosaic or channel_mosaic(view.latents, self.lut)  # coloured by the reader
            scale = f"±{limit:.3g}" if np.isfinite(view.latents).any() else "all NaN/Inf"  # no scale to give
            self._set("latents", mosaic, f"latents · {view.latents.shape[0]} ch · {scale}")
        else:
            self._set("latents", None, f"latents · step {view.step} unreadable" if view.error else None)
        self._set("x_t preview", view.latents_preview)
        self._set("predicted x₀", view.x0_preview)
        decoded, title = view.decoded, DECODE_TITLE.format(step=view.step)
        if not first:
            decoded = self._sample_decode(view)
            title = SAMPLE_DECODE_TITLE.format(shown=self.sample + 1)
        if decoded is None:
            title = DECODE_NONE
        elif view.latents is not None and not np.isfinite(view.latents).all():
            # A PNG cannot hold NaN (it was written black); a VAE decode of non-finite latents is non-finite
            # everywhere (its group norms spread it): shown magenta, as every non-finite pixel is.
            decoded = np.full(decoded.shape, NON_FINITE_RGBA[:3], np.uint8)
            title += " · NaN/Inf"
        self._set("VAE decode", decoded, title)

    def _sample_decode(self, view: StepData) -> np.ndarray | None:
        """The decode of the selected (not first) sample at the shown step when it was read; else asks for it."""
        record = self.model.record
        if record is None or view.run_dir is None:
            return None
        key = (view.run_dir, view.step, view.version, self.sample)
        if key != self._decode_for:
            self._decode_for, self.decoded, self.decode_loading = key, None, True
            step, sample = view.step, self.sample
            self._decode_reader.submit(key, lambda _task: read_decode(record, step, sample))
        return self.decoded

    def _on_decode(self, key: Any, found: Any) -> None:
        if key != self._decode_for:
            return  # another step, sample or decode was asked for since
        self.decode_loading = False
        self.decoded = found if isinstance(found, np.ndarray) else None  # an exception: a bug of ours, logged
        if self.decoded is not None:
            self._show_step(self.shown)

    def _show_final(self) -> None:
        record = self.model.record
        if record is None:
            self._final_reader.cancel()
            self._final_for, self.final_loading, self.final_problem = None, False, ""
            self._set("final image", None)
            self._say()
            return
        key = (str(record.path), self.model.status, self.sample, self.batch.count if self.batch is not None else 0)
        if key == self._final_for:
            return
        if self._final_for is None or key[0] != self._final_for[0]:  # another run: not the last one's problem
            self.final_problem = ""
            self._say()
        self._final_for, self.final_loading = key, True
        name = final_name(self.sample)
        self._final_reader.submit(key, lambda _task: read_final(record, name))

    def _on_final(self, key: Any, found: Any) -> None:
        if key != self._final_for:
            return  # another run (or status) was asked for since
        if isinstance(found, Exception):  # a bug of ours (the log has it): said like a refused image
            found = (None, messages.FINAL_REFUSED.format(message=one_line(found)))
        image, problem = found
        self.final_loading = False
        self.final_problem = problem
        if image is not None:
            title = "final image" if key[3] < 2 else f"final image {key[2] + 1} of {key[3]}"
        elif problem:
            title = messages.FINAL_NOT_SHOWN
        else:
            title = "final image (pending)" if key[1] == "running" else messages.FINAL_NONE
        self._set("final image", image, title)
        self._say()

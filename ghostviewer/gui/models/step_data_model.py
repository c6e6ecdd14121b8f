"""StepDataModel: the selected step of one run, read once off the GUI thread and shared by every view.

The step's file is read by a plain function (step_data.load_step_data) on a worker; the result comes back to
the GUI thread as one read-only StepData (stepLoaded). One read at a time, the newest wish wins, results the
user has moved past are dropped; a small LRU cache serves the steps seen lately. Views attach themselves: while
none of them is on screen (a dock closed or behind another tab) nothing is read, and a view that comes back
asks for the step then (ready()). The attention maps "over the run" are summed as steps pass by and the steps
never shown are read once per run, in the background, on the GUI's one Worker (gui/link/worker.py).
DrawWhenShown (draw a view only while it is on screen, else once it is back) and ShownStep (the same for a view
of the selected step) are the one way views bind to what they show.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PySide6.QtCore import QEvent, QObject, QTimer, Signal
from PySide6.QtWidgets import QDockWidget, QWidget

from ghostviewer.gui.data.attention_data import AttentionRun, read_attention
from ghostviewer.gui.data.step_data import NO_STEP, StepData, StepKey, load_step_data
from ghostviewer.gui.link.worker import Task, Worker
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RunRecord

CACHE_STEPS = 8


def is_shown(widget: QWidget) -> bool:
    """On screen, or would be once its window shows: not hidden, not in a closed dock or behind a dock tab."""
    try:
        window = widget.window()
        if not widget.isVisibleTo(window):
            return False
        return not window.isVisible() or not widget.visibleRegion().isEmpty()
    except RuntimeError:  # the widget is gone
        return False


class _VisibilityWatch(QObject):
    """Calls on_shown when its widget is shown, placed where it would be shown, or the dock holding it comes to
    the front of its tabs."""

    def __init__(self, widget: QWidget, on_shown: Callable[[], None]) -> None:
        super().__init__(widget)
        self._on_shown = on_shown
        self._dock: QDockWidget | None = None
        widget.installEventFilter(self)
        self._find_dock(widget)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.ParentChange and isinstance(watched, QWidget):
            self._find_dock(watched)
            if is_shown(watched):  # e.g. placed in a window not shown yet: as if on screen
                self._on_shown()
        elif event.type() == QEvent.Type.Show:
            self._on_shown()
        return False

    def _find_dock(self, widget: QWidget) -> None:
        parent = widget.parentWidget()
        while parent is not None and not isinstance(parent, QDockWidget):
            parent = parent.parentWidget()
        if parent is not None and parent is not self._dock:
            self._dock = parent
            parent.visibilityChanged.connect(self._on_dock_visibility)

    def _on_dock_visibility(self, visible: bool) -> None:
        if visible:
            self._on_shown()


def watch_visibility(widget: QWidget, on_shown: Callable[[], None]) -> None:
    """Call on_shown whenever `widget` comes (back) on screen, including its dock's tab being raised."""
    _VisibilityWatch(widget, on_shown)


class DrawWhenShown(QObject):
    """A view's drawing, done only while the view is on screen: changed() (something it shows changed) draws
    now when the view is on screen, else marks it stale, and it is drawn when it comes back (shown, or its dock's
    tab raised). `stale`: draw at the first showing even if nothing changed before it. `watch`: False when a
    subclass watches the view itself."""

    def __init__(self, view: QWidget, draw: Callable[[], None], *, stale: bool = True, watch: bool = True) -> None:
        super().__init__(view)
        self.view, self._draw, self.stale = view, draw, stale
        if watch:
            watch_visibility(view, self._on_shown)

    def changed(self) -> None:
        if is_shown(self.view):
            self.draw()
        else:
            self.stale = True

    def draw(self) -> None:
        self.stale = False
        self._draw()

    def _on_shown(self) -> None:
        if self.stale:
            self.draw()


class StepDataModel(QObject):
    stepLoaded = Signal(object)  # StepData of the selected step (NO_STEP when none is selected)
    runAttentionChanged = Signal()  # more steps were added to the attention "over the run"

    def __init__(self, timeline: TimelineModel | None = None, *, cache_size: int = CACHE_STEPS,
                 synchronous: bool = False, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.synchronous = synchronous  # tests: read in the calling thread, deliver before returning
        self.cache_size = cache_size
        self.record: RunRecord | None = None
        self.live = False
        self.steps: list[int] = []  # the run's recorded step indexes (for the attention over the run)
        self.current: StepData = NO_STEP
        self.mosaic_lut: np.ndarray | None = None  # the latents view's colour map: the reader colours them
        self.dropped = 0  # results that came back after the user had moved on (not shown)
        self._wanted: StepKey | None = None
        self._versions: dict[tuple[str, int], int] = {}
        self._cache: OrderedDict[StepKey, StepData] = OrderedDict()
        self._loading: StepKey | None = None
        self._views: list[QWidget] = []
        self._attention = AttentionRun()
        self._attention_loading = False
        self._worker = Worker(2, what="reading a step", parent=self)  # one step read and one attention pass
        self._worker.answered.connect(self._on_answer)
        if timeline is not None:
            self.bind(timeline)

    # -- what is wanted ---------------------------------------------------------------------------
    def bind(self, timeline: TimelineModel) -> None:
        """Follow a timeline: its run, its step (the record's index), its liveness and its decodes."""
        def follow() -> None:
            self.select(timeline.record, timeline.step, timeline.live, [info.index for info in timeline.steps])

        timeline.runChanged.connect(follow)
        timeline.stepChanged.connect(lambda _step: follow())
        timeline.stepsChanged.connect(lambda _count: follow())
        timeline.statusChanged.connect(follow)
        timeline.decodedChanged.connect(self.invalidate)

    @property
    def run_dir(self) -> str | None:
        return None if self.record is None else str(self.record.path)

    def select(self, record: RunRecord | None, step: int, live: bool = False,
               steps: Sequence[int] | None = None) -> None:
        """Show this step (the record's index) of this run; -1 or no record: nothing."""
        if (None if record is None else str(record.path)) != self.run_dir:
            self._attention, self._attention_loading = AttentionRun(), False
        self.record, self.live = record, live
        if steps is not None:
            self.steps = list(steps)
        if record is None or step < 0:
            self._wanted = None
            if not self.current.empty:
                self._deliver(NO_STEP)
            return
        path = str(record.path)
        self._wanted = (path, int(step), self._versions.get((path, int(step)), 0))
        self._request()

    def invalidate(self, step: int) -> None:
        """A file of this step changed (a decode was written): forget it, and read it again if it is shown."""
        if self.record is None:
            return
        path = str(self.record.path)
        self._versions[(path, step)] = self._versions.get((path, step), 0) + 1
        for key in [k for k in self._cache if k[:2] == (path, step)]:
            del self._cache[key]
        if self._wanted is not None and self._wanted[:2] == (path, step):
            self._wanted = (path, step, self._versions[(path, step)])
            self._request()

    def attach(self, view: QWidget, on_shown: Callable[[], None]) -> None:
        """A view that shows this model's steps: reads happen only while one of them is on screen."""
        self._views.append(view)
        watch_visibility(view, on_shown)

    def ready(self) -> StepData | None:
        """The selected step's data if it is loaded; else None, and a read starts (stepLoaded follows)."""
        if self._wanted is None or self.current.key == self._wanted:
            return self.current
        self._request(force=True)
        return self.current if self.current.key == self._wanted else None

    @property
    def idle(self) -> bool:
        """Nothing being read and the selected step delivered (tests wait on it)."""
        return self._loading is None and not self._attention_loading and (
            self._wanted is None or self.current.key == self._wanted)

    # -- reading ----------------------------------------------------------------------------------
    def _demanded(self) -> bool:
        self._views = [v for v in self._views if _alive(v)]
        return not self._views or any(is_shown(v) for v in self._views)

    def _request(self, force: bool = False) -> None:
        key = self._wanted
        if key is None or self.current.key == key or not (force or self._demanded()):
            return
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            self._deliver(hit)
            return
        if self._loading is not None:
            return  # one read at a time: when it ends, the newest wish is read
        record, look_for_decode, lut = self.record, not self.live, self.mosaic_lut
        self._loading = key
        self._submit("step", key, lambda _task: load_step_data(record, key[1], key[2], look_for_decode,  # type: ignore[arg-type]
                                                               lut))

    def _submit(self, kind: str, key: object, work: Callable[[Task], Any]) -> None:
        self._worker.synchronous = self.synchronous
        self._worker.submit((kind, key), work)

    def _on_answer(self, tag: tuple[str, Any], result: Any) -> None:
        self._on_done((*tag, result))

    def _on_done(self, message: tuple[str, Any, Any]) -> None:
        kind, key, result = message
        if kind == "attention":
            self._attention_loading = False
            if key == self.run_dir and isinstance(result, list):
                added = [self._attention.add(step, maps) for step, maps in result]
                if any(added):
                    self.runAttentionChanged.emit()
            return
        self._loading = None
        if not isinstance(result, StepData):  # an unexpected failure: show the step as unreadable
            result = StepData(key[0], key[1], key[2], error=str(result))
        else:
            self._cache[key] = result
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        if key == self._wanted:
            self._deliver(result)
        else:
            self.dropped += 1
            self._request()  # the step wanted now

    def _deliver(self, data: StepData) -> None:
        self.current = data
        if not data.empty and data.run_dir == self.run_dir:
            self._attention.add(data.step, data.tensors)
        self.stepLoaded.emit(data)

    # -- attention over the run -------------------------------------------------------------------
    def run_attention(self, layer: str | None, tokens: int) -> np.ndarray | None:
        """The mean cross-attention map per token over the run's steps read so far; the steps not yet read
        are read once, in the background (runAttentionChanged when they are in)."""
        missing = [s for s in self.steps if s not in self._attention.steps]
        if missing and self.record is not None and not self._attention_loading:
            record = self.record
            self._attention_loading = True
            self._submit("attention", str(record.path), lambda _task: read_attention(record, missing))
        return self._attention.mean(layer, tokens)

    @property
    def attention_steps(self) -> int:
        return len(self._attention.steps)

    def shutdown(self, timeout_ms: int = 2000) -> None:
        """Drop queued reads and wait for the running ones (before the app quits)."""
        self._worker.shutdown(timeout_ms)


class ShownStep(DrawWhenShown):
    """DrawWhenShown for a view of the selected step (images, feature maps, attention): `data` is the step it
    shows, or will once on screen; a step the model delivers is a change; a view that comes back asks the model
    for the step it missed (read then: nothing is read while no view of the model is on screen)."""

    def __init__(self, view: QWidget, model: StepDataModel, draw: Callable[[], None]) -> None:
        super().__init__(view, draw, watch=False)
        self.model = model
        self.data: StepData = NO_STEP
        model.stepLoaded.connect(self._on_data)
        model.attach(view, self._on_shown)
        if is_shown(view):  # drawn from the event loop: the view is still being built
            QTimer.singleShot(0, self, self._on_shown)

    def _on_data(self, data: StepData) -> None:
        self.data = data
        self.changed()

    def _on_shown(self) -> None:
        data = self.model.ready()
        if data is not None and (self.stale or data is not self.data):
            self.data = data
            self.draw()


def _alive(widget: QWidget) -> bool:
    try:
        widget.objectName()
        return True
    except RuntimeError:
        return False

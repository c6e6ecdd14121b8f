"""The scrub bar under the images: play/pause, the step slider, the step's numbers, the verdict badge, and
the decode and replay buttons. Bound to TimelineModel both ways: the slider is the step's place in the list
(TimelineModel.position), the label says the record's step index — 0-based, like the record, the heat map, the
plot and every message."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProxyStyle,
    QSizePolicy,
    QSlider,
    QStyle,
    QToolButton,
    QWidget,
)

from ghostviewer.analysis.compare import describe_divergence
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.elided_label import ElidedLabel
from ghostviewer.gui.widgets.verdict_badge import VerdictBadge


class ReplayWords(QLabel):
    """The replay's result: asks for the room of its words, takes down to the room of its sign."""

    def __init__(self) -> None:
        super().__init__()
        self.words = ""
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("✗") + 12)

    def words_width(self) -> int:
        font = QFont(self.font())
        font.setBold(True)
        return QFontMetrics(font).horizontalAdvance(self.words) + 6

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(self.words_width() if self.words else 0, super().sizeHint().height())


class JumpToClickStyle(QProxyStyle):
    """A click in the slider's groove moves the handle to the click (the step under it), not a page of 5."""

    def styleHint(self, hint, option=None, widget=None, returnData=None):  # noqa: ANN001, ANN201, N802, N803
        if hint == QStyle.StyleHint.SH_Slider_AbsoluteSetButtons:
            return Qt.MouseButton.LeftButton.value
        return super().styleHint(hint, option, widget, returnData)


DECODE_TIP = "Full VAE decode of this step's latents (Ctrl+D)"
DECODE_NO_LATENTS = "This step kept no latents (a sweep's runs keep only their previews): nothing to decode"


class TimelineBar(QWidget):
    decodeRequested = Signal()
    replayRequested = Signal()

    def __init__(self, model: TimelineModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.play = QToolButton(checkable=True, toolTip="Play / pause (Space)")
        self._icons = {playing: self.style().standardIcon(pixmap) for playing, pixmap in (
            (False, QStyle.StandardPixmap.SP_MediaPlay), (True, QStyle.StandardPixmap.SP_MediaPause))}
        self.play.setIcon(self._icons[False])
        self.slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=0, pageStep=5)
        self._slider_style = JumpToClickStyle()  # proxies the application style without owning it (kept here)
        self.slider.setStyle(self._slider_style)
        self.slider.setToolTip("Denoising step (← / →, Home / End)")
        self.slider.setMinimumWidth(100)  # nothing beside it may squeeze it away
        self.step_label = ElidedLabel("no run")  # in a narrow bar the step's number stays, the rest behind '…'
        self.step_label.setMinimumWidth(self.fontMetrics().horizontalAdvance("step 888 o…") + 6)
        self.step_label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.badge = VerdictBadge()
        self.decode = QToolButton(text="Decode", toolTip=DECODE_TIP)
        self.decodable = True  # the shown step kept its latents (set_step_data)
        self.replay = QToolButton(text="Replay",
                                  toolTip="Replay seed: re-run with exactly the recorded settings (Ctrl+R)")
        self.replay_result = ReplayWords()  # a few words (a sign alone when narrow); the details in its tooltip
        self._replay_words: tuple[str, str, str] | None = None  # (text, sign, colour)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.setSpacing(4)
        for widget in (self.play, self.slider, self.step_label, self.badge, self.decode, self.replay,
                       self.replay_result):
            layout.addWidget(widget, 1 if widget is self.slider else 0)
        self.play.clicked.connect(lambda _checked: model.toggle_play())
        self.slider.valueChanged.connect(model.set_position)
        self.decode.clicked.connect(self.decodeRequested)
        self.replay.clicked.connect(self.replayRequested)
        model.runChanged.connect(self._on_run)
        model.stepsChanged.connect(self._on_steps)
        model.stepChanged.connect(self._on_step)
        model.playingChanged.connect(self._on_playing)
        model.statusChanged.connect(lambda: self.badge.show_badge(model.badge()))
        self._on_run()

    def _on_run(self) -> None:
        self.replay_result.clear()
        self.replay_result.words = ""
        self._replay_words = None
        self._on_steps(self.model.count)
        self._on_step()
        self.badge.show_badge(self.model.badge())

    def set_step_data(self, data: object) -> None:
        """The shown step as read (StepData): Decode only where the step kept its latents (a sweep's runs keep
        none: a decode there would only fail)."""
        empty = getattr(data, "empty", True)
        self.decodable = empty or getattr(data, "latents", None) is not None
        self.decode.setEnabled(self.model.count > 0 and self.decodable)
        self.decode.setToolTip(DECODE_TIP if self.decodable else DECODE_NO_LATENTS)

    def _on_steps(self, count: int) -> None:
        self.slider.blockSignals(True)
        self.slider.setMaximum(max(count - 1, 0))
        self.slider.blockSignals(False)
        self.slider.setEnabled(count > 0)
        self.decode.setEnabled(count > 0 and self.decodable)
        self.replay.setEnabled(self.model.record is not None)
        self.badge.show_badge(self.model.badge())
        self._on_step()

    def _on_step(self, _step: int = -1) -> None:
        self.slider.blockSignals(True)
        self.slider.setValue(max(self.model.position, 0))
        self.slider.blockSignals(False)
        info = self.model.step_info()
        if info is None:
            self.step_label.set_full_text("no steps recorded" if self.model.record is not None else "no run")
            return
        total = self.model.planned_steps
        last = f" of 0–{total - 1}" if total else ""
        sigma = "" if info.sigma is None else f" σ={info.sigma:.3g}"
        timestep = "" if info.timestep is None else f" · t={info.timestep:.0f}"
        self.step_label.set_full_text(f"step {info.index}{last}{timestep}",
                                      tip=f"step {info.index} (the record's index, from 0){timestep}{sigma}"
                                          f" · {info.wall_s * 1000:.0f} ms")

    def _show_replay_words(self) -> None:
        """The words when they fit beside the buttons, else the sign alone (never a clipped word)."""
        if self._replay_words is None:
            return
        text, sign, colour = self._replay_words
        self.replay_result.words = text
        self.replay_result.updateGeometry()
        fits = self.replay_result.words_width() <= self.replay_result.width()
        shown = f"<b style='color:{colour}'>{text if fits else sign}</b>"
        if self.replay_result.text() != shown:
            self.replay_result.setText(shown)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._show_replay_words()

    def _on_playing(self, playing: bool) -> None:
        self.play.setChecked(playing)
        self.play.setIcon(self._icons[playing])

    def show_replay(self, result: dict[str, Any]) -> None:
        reproduced, where = result.get("reproduced"), ""
        if reproduced is None:
            text, sign, colour = "replay unfinished", "…", "#757575"
        elif reproduced:
            text, sign, colour = "reproduced ✓", "✓", "#2e7d32"
        else:
            where = "first difference: " + describe_divergence(result.get("first_divergence") or {}) + "\n"
            text, sign, colour = "NOT reproduced ✗", "✗", "#c62828"
        self._replay_words = (text, sign, colour)
        self._show_replay_words()
        self.replay_result.setToolTip(f"replay of seed {result.get('seed')}: {text}\n{where}"
                                      f"original: {result.get('original')}\nreplay: {result.get('replay')}")

"""The verdict of the shown run as a coloured badge (or its state: running, incomplete, cancelled...); `wrap=True`
makes the badge of one sample of a batch, whose sentence ("image 3 of 4: NaN at step 7 in …") wraps to its width."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from ghostviewer.gui.models.timeline_model import Badge

COLOURS = {
    "none": ("#9e9e9e", "#ffffff"), "running": ("#1565c0", "#ffffff"), "ok": ("#2e7d32", "#ffffff"),
    "warn": ("#a86400", "#ffffff"),
    "bad": ("#c62828", "#ffffff"), "cancelled": ("#616161", "#ffffff"), "failed": ("#b71c1c", "#ffffff"),
    "incomplete": ("#ef6c00", "#ffffff"),
}

PADDING_PX = 10


class VerdictBadge(QLabel):
    def __init__(self, parent: QWidget | None = None, wrap: bool = False) -> None:
        super().__init__(parent)
        self.wrap = wrap
        self.setAlignment(Qt.AlignmentFlag.AlignCenter if not wrap else Qt.AlignmentFlag.AlignLeft
                          | Qt.AlignmentFlag.AlignVCenter)
        self.setMinimumWidth(80)
        self.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Fixed)
        if wrap:  # its room is the tile's: the words wrap, never widen the strip
            self.setWordWrap(True)
            self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.kind = "none"
        self._shown: Badge | None = None
        self.show_badge(Badge("no run", "none"))

    def show_badge(self, badge: Badge) -> None:
        if badge == self._shown:
            return  # restyling costs more than a step's worth of drawing
        self._shown = badge
        background, foreground = COLOURS.get(badge.kind, COLOURS["none"])
        self.kind = badge.kind
        self.setText(badge.text)
        self.setToolTip(badge.tooltip)
        shape = ("border-radius: 6px; padding: 1px 4px; font-size: 8pt;" if self.wrap
                 else f"border-radius: 8px; padding: 2px {PADDING_PX}px;")
        weight = "normal" if self.wrap else "bold"  # a sample's sentence wraps: narrower glyphs, fewer lines
        self.setStyleSheet(f"QLabel {{ background: {background}; color: {foreground}; {shape}"
                           f" font-weight: {weight}; }}")
        if not self.wrap:
            self.setMinimumWidth(max(80, self.needed_width()))  # a squeezed bar never clips the verdict

    def needed_width(self) -> int:
        """The whole text, bold, with the badge's padding: what must stay visible."""
        font = QFont(self.font())
        font.setBold(True)
        return QFontMetrics(font).horizontalAdvance(self.text()) + 2 * PADDING_PX + 4

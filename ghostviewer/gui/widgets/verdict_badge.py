"""The verdict of the shown run as a coloured badge (or its state: running, incomplete, cancelled...)."""

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
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setMinimumWidth(80)
        self.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Fixed)
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
        self.setStyleSheet(f"QLabel {{ background: {background}; color: {foreground}; border-radius: 8px;"
                           f" padding: 2px {PADDING_PX}px; font-weight: bold; }}")
        self.setMinimumWidth(max(80, self.needed_width()))  # a squeezed bar never clips the verdict

    def needed_width(self) -> int:
        """The whole text, bold, with the badge's padding: what must stay visible."""
        font = QFont(self.font())
        font.setBold(True)
        return QFontMetrics(font).horizontalAdvance(self.text()) + 2 * PADDING_PX + 4

"""The window's size and dock layout: the default size and dock sizes, the window fitted inside the screen it
opens on, and the saved layout stored with a version (a layout of another version is dropped, not mangled):
MainWindow makes its default layout at the first show, keeps it for View ▸ Reset layout, then restores the
saved one over it.

The side columns take the bottom corners (setCorner in the window), so the bottom docks sit under the images
only and the left column — pipeline, prompt and its Run button, queue — has the window's full height."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QByteArray, QRect, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDockWidget, QFrame, QMainWindow, QScrollArea, QTabBar, QWidget

from ghostviewer.gui.app_settings import LAYOUT_VERSION

DEFAULT_SIZE = (1366, 768)
LEFT_WIDTH, RIGHT_WIDTH = 290, 420  # the right column fits the Blocks columns and the heat map's labels
LEFT_HEIGHTS = {"Pipeline": 175, "Prompt": 330, "Run queue": 160}
BOTTOM_HEIGHT = 150
TITLE_BAR_PX = 32  # room for the window manager's title bar before the window has a frame to measure
GEOMETRY_KEY, STATE_KEY = "window/geometry", "window/state"


class ScrollDock(QDockWidget):
    """A dock whose content scrolls when the dock is smaller than the content's minimum size, so that no dock
    can hold the window larger than the screen. `widget()` answers the content, not the scroll area."""

    def setWidget(self, widget: QWidget) -> None:  # noqa: N802 - Qt's name
        self._content = widget
        area = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        super().setWidget(area)
        area.setWidget(widget)  # after: the content's new parent is already inside the dock (watch_visibility)

    def widget(self) -> QWidget:
        return self._content


def docks_by_title(window: Any) -> dict[str, Any]:
    return {dock.windowTitle(): dock for dock in window.docks}


def default_dock_sizes(window: Any) -> None:
    docks = docks_by_title(window)
    left = [docks[t] for t in LEFT_HEIGHTS if t in docks]
    window.resizeDocks(left, [LEFT_HEIGHTS[d.windowTitle()] for d in left], Qt.Orientation.Vertical)
    right = [d for t, d in docks.items() if window.dockWidgetArea(d) == Qt.DockWidgetArea.RightDockWidgetArea]
    if left and right:
        window.resizeDocks([left[0], right[0]], [LEFT_WIDTH, RIGHT_WIDTH], Qt.Orientation.Horizontal)
    bottom = [d for d in docks.values() if window.dockWidgetArea(d) == Qt.DockWidgetArea.BottomDockWidgetArea]
    if bottom:
        window.resizeDocks(bottom[:1], [BOTTOM_HEIGHT], Qt.Orientation.Vertical)


def available_area(window: QMainWindow) -> QRect | None:
    screen = window.screen() or QGuiApplication.primaryScreen()
    return None if screen is None else screen.availableGeometry()


def fit_to_screen(window: QMainWindow) -> None:
    """Shrink and move the window so all of it (title bar included) is inside the screen's available area."""
    area = available_area(window)
    if area is None or window.isMaximized() or window.isFullScreen():
        return
    frame = window.frameGeometry()
    extra_w = max(frame.width() - window.width(), 0)
    extra_h = max(frame.height() - window.height(), TITLE_BAR_PX if frame == window.geometry() else 0)
    width = min(window.width(), area.width() - extra_w)  # Qt keeps it at least at the minimum size
    height = min(window.height(), area.height() - extra_h)
    window.resize(width, height)
    x = min(max(frame.x(), area.left()), max(area.right() + 1 - width - extra_w, area.left()))
    y = min(max(frame.y(), area.top()), max(area.bottom() + 1 - height - extra_h, area.top()))
    window.move(x, y)


def restore_geometry(window: QMainWindow, settings: Any) -> QByteArray | None:
    """Restore the remembered geometry; return the remembered dock layout (restored by the window after its
    default layout exists, with LAYOUT_VERSION: a layout of another version is refused), None when none."""
    geometry = settings.get_bytes(GEOMETRY_KEY)
    if geometry is not None:
        window.restoreGeometry(geometry)
    return settings.get_bytes(STATE_KEY)


def hide_stray_tab_bars(window: Any) -> int:
    """Qt can leave the tab bar of a former tab group on screen after restoreState: hide every dock tab bar
    whose tabs are not exactly one of today's tab groups (of every dock of the window: the welcome panel's too).
    Returns how many it hid."""
    docks = {dock.windowTitle(): dock for dock in window.findChildren(QDockWidget) if dock.parentWidget() is window}
    hidden = 0
    for bar in window.findChildren(QTabBar):
        titles = {bar.tabText(i) for i in range(bar.count())}
        if not bar.isVisible() or bar.parentWidget() is not window or not titles <= docks.keys():
            continue
        some = docks[next(iter(titles))] if titles else None
        group = set() if some is None else {d.windowTitle() for d in window.tabifiedDockWidgets(some)
                                            if not d.isHidden()}
        if not titles or some is None or some.isHidden() or titles != group | {some.windowTitle()}:
            bar.hide()
            hidden += 1
    return hidden


def save_layout(window: QMainWindow, settings: Any) -> None:
    settings.set_bytes(GEOMETRY_KEY, window.saveGeometry())
    settings.set_bytes(STATE_KEY, window.saveState(LAYOUT_VERSION))

"""Tests that look at what is drawn: a REAL recorded demo run (made once for the module,
tests/gui/demo_runs.py) shown in an offscreen window at 1366×768; each view is grabbed and its pixels
and view ranges checked — the data must be inside the view, not drawn off-screen or as a flat colour."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QApplication, QGraphicsView, QWidget

from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.widgets.embeddings_view import SOURCES, place_labels
from tests.gui.demo_runs import demo_run
from tests.gui.fake_runs import write_fake_run
from tests.gui.live_window import needs_demo

pytestmark = needs_demo
PROMPT = "a red circle on a blue background"
BACKGROUND = QColor("#202124")
MAGENTA = (255, 0, 255)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(demo_run(tmp_path_factory, tmp_path_factory.mktemp("pixels-runs"), PROMPT, seed=1, steps=6,
                        capture=["unet.mid_block*"], capture_attention=True))


@pytest.fixture(scope="module")
def win(qapp, tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001
    """A shown window with no engine and no run yet (the stat plot starts from its empty state)."""
    from ghostviewer.gui.app import create_window

    root = tmp_path_factory.mktemp("pixels")
    window = create_window(AppSettings(root / "settings.ini"), dialogs=False)
    window.state.history.set_runs_dir(root / "runs")
    window.resize(1366, 768)
    window.show()
    yield window
    window.close()


def settle(qtbot, win) -> None:  # noqa: ANN001
    qtbot.waitUntil(lambda: win.state.step_data.idle and not win.step_images.final_loading
                    and not win.heatmap.loading and win.stat_plot.idle, timeout=10_000)  # all read off the GUI thread
    qtbot.wait(50)  # queued replots and repaints


def plot_settled(qtbot, win) -> None:  # noqa: ANN001
    qtbot.waitUntil(lambda: win.stat_plot.idle, timeout=5000)  # read, and redrawn
    qtbot.wait(20)  # pyqtgraph fits the view range to the new data when it paints


def pixels(widget: QWidget) -> np.ndarray:
    """The widget as drawn now: (H, W, 3) uint8."""
    image = widget.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, :image.width() * 3].reshape(image.height(), image.width(), 3).copy()


def region(view: QGraphicsView, scene_rect: QRectF) -> tuple[slice, slice]:
    """Rows and columns of the grabbed view covered by a scene rectangle (clipped to the view)."""
    rect = view.mapFromScene(scene_rect).boundingRect().intersected(view.viewport().rect())
    return slice(rect.top(), rect.bottom() + 1), slice(rect.left(), rect.right() + 1)


def near(image: np.ndarray, colour: QColor, tolerance: int = 40) -> np.ndarray:
    target = np.array([colour.red(), colour.green(), colour.blue()], np.int32)
    return np.abs(image.astype(np.int32) - target).max(axis=-1) <= tolerance


def raise_dock(win, widget: QWidget) -> None:  # noqa: ANN001
    next(d for d in win.docks if d.widget() is widget).raise_()


def check_plot_shows_its_curves(plot) -> None:  # noqa: ANN001 - StatPlot
    viewbox = plot.plot.getViewBox()
    (x_lo, x_hi), (y_lo, y_hi) = viewbox.viewRange()
    xs, ys = [], []
    for curve in plot._curves.values():
        x, y = curve.getData()
        xs.append(x[np.isfinite(y)])
        ys.append(y[np.isfinite(y)])
    x, y = np.concatenate(xs), np.concatenate(ys)
    assert x.size, "no data plotted"
    assert x_lo <= x.min() and x.max() <= x_hi, ((x_lo, x_hi), (x.min(), x.max()))
    assert y_lo <= y.min() and y.max() <= y_hi, ((y_lo, y_hi), (y.min(), y.max()))
    image = pixels(plot.plot)
    rows, cols = region(plot.plot, viewbox.sceneBoundingRect())
    inside = image[rows, cols]
    legend = np.zeros(image.shape[:2], bool)
    lr, lc = region(plot.plot, plot.legend.sceneBoundingRect())
    legend[lr, lc] = True
    seen = 0
    for curve in plot._curves.values():
        colour = curve.opts["pen"].color()
        hits = near(inside, colour, 24) & ~legend[rows, cols]
        seen += int(hits.sum() >= 20)
    assert seen >= max(1, len(plot._curves) // 2), f"only {seen} of {len(plot._curves)} curves are on screen"
    assert not near(inside, BACKGROUND, 4).all()


@pytest.mark.slow
def test_stat_plot_curves_are_inside_the_view(real_run: str, win, qtbot) -> None:  # noqa: ANN001
    win.state.opener.open_run(real_run)  # from the empty plot: the case that was drawn off-screen
    settle(qtbot, win)
    assert win.stat_plot._curves
    check_plot_shows_its_curves(win.stat_plot)
    for stat in ("mean", "std", "fp16_headroom", "absmax"):  # re-fitted when the selection changes
        win.state.selection.set_stat(stat)
        qtbot.wait(20)
        check_plot_shows_its_curves(win.stat_plot)
    module = next(m for m in win.state.selection.modules)
    win.state.selection.toggle(module, False)
    qtbot.wait(20)
    check_plot_shows_its_curves(win.stat_plot)
    win.state.selection.toggle(module, True)  # its series is read again, off the GUI thread
    settle(qtbot, win)
    assert module in win.stat_plot._curves
    check_plot_shows_its_curves(win.stat_plot)


def test_stat_plot_follows_a_live_run(win, qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    timeline = win.state.timeline
    timeline.close_run()  # the empty plot again

    def on_step(run_dir: Path, step: int) -> None:
        if step == 0:
            timeline.open_run(run_dir, live=True)
        else:
            timeline.refresh()
        for _ in range(3):
            QApplication.processEvents()
        if step == 2:  # the new rows are read off the GUI thread, the redraws come at most ~10 a second
            plot_settled(qtbot, win)
            x, _ = next(iter(win.stat_plot._curves.values())).getData()
            assert list(x) == [0, 1, 2]
            check_plot_shows_its_curves(win.stat_plot)

    run = write_fake_run(tmp_path, steps=5, on_step=on_step)
    timeline.set_live(False)
    plot_settled(qtbot, win)
    assert timeline.run_dir == str(run) and timeline.count == 5
    assert all(len(curve.getData()[0]) == 5 for curve in win.stat_plot._curves.values())
    check_plot_shows_its_curves(win.stat_plot)


def test_heat_map_is_drawn_with_its_cursor(real_run: str, win, qtbot) -> None:  # noqa: ANN001
    state, heatmap = win.state, win.heatmap
    state.opener.open_run(real_run)
    raise_dock(win, heatmap)
    settle(qtbot, win)
    assert heatmap.grid is not None
    module = heatmap.grid.modules[len(heatmap.grid.modules) // 2]
    state.blocks.select(module)
    state.timeline.set_step(2)
    settle(qtbot, win)
    image = pixels(heatmap.plot)
    rows, cols = region(heatmap.plot, heatmap.image.sceneBoundingRect())
    cells = image[rows, cols]
    assert cells.size and cells.reshape(-1, 3).std(axis=0).max() > 10, "the heat map is one flat colour"
    assert heatmap.cursor.isVisible()
    rect = heatmap.plot.mapFromScene(heatmap.cursor.mapToScene(heatmap.cursor.rect())).boundingRect()
    top = image[rect.top() - 1:rect.top() + 2, rect.left() + 2:rect.right() - 1]
    assert near(top, QColor("#ffca28"), 40).any(axis=0).mean() > 0.6, "the cursor cell's outline is not drawn"


@pytest.mark.slow
def test_step_images_show_the_step(real_run: str, win, qtbot) -> None:  # noqa: ANN001
    state = win.state
    state.opener.open_run(real_run)
    state.timeline.set_step(3)
    settle(qtbot, win)
    assert win.step_images.shown.step == 3
    for name in ("latents", "x_t preview", "predicted x₀", "final image"):
        pane = win.step_images.panes[name]
        assert pane.item.image is not None, name
        image = pixels(pane)
        rows, cols = region(pane, pane.item.sceneBoundingRect())
        drawn = image[rows, cols].reshape(-1, 3)
        assert len(drawn) > 100, f"{name}: the image is not on screen"
        assert drawn.std(axis=0).max() > 10, f"{name}: one flat colour"
        assert (np.abs(drawn.astype(int) - MAGENTA).max(axis=1) > 30).mean() > 0.5, f"{name}: magenta (NaN)"


def test_feature_map_grid_is_drawn(real_run: str, win, qtbot) -> None:  # noqa: ANN001
    state, view = win.state, win.feature_maps
    state.opener.open_run(real_run)
    raise_dock(win, view)
    state.blocks.select("unet.mid_block")
    settle(qtbot, win)
    assert view.captured and view.grid is not None and view.grid.count == 64
    image = pixels(view.canvas)
    rows, cols = region(view.canvas, view.image.sceneBoundingRect())
    drawn = image[rows, cols].reshape(-1, 3)
    assert len(drawn) > 400 and drawn.std(axis=0).max() > 10, "the feature maps are one flat colour"


def test_attention_maps_are_drawn(real_run: str, win, qtbot) -> None:  # noqa: ANN001
    state, view = win.state, win.attention
    state.opener.open_run(real_run)
    raise_dock(win, view)
    settle(qtbot, win)
    assert view.maps is not None and view.maps.shape[0] == len(view.tokens)
    image = pixels(view.canvas)
    rows, cols = region(view.canvas, view.image.sceneBoundingRect())
    assert image[rows, cols].reshape(-1, 3).std(axis=0).max() > 10, "the attention maps are one flat colour"


def test_embedding_labels_never_overlap_and_hover_lists_every_token(real_run: str, win, qtbot) -> None:  # noqa: ANN001
    state, view = win.state, win.embeddings
    state.opener.open_run(real_run)
    raise_dock(win, view)
    settle(qtbot, win)
    for source in SOURCES:
        view.source.setCurrentText(source)
        qtbot.wait(20)
        assert view.points is not None and len(view.labels) == np.isfinite(view.points).all(axis=1).sum()
        shown = view.shown_labels
        assert shown, "no token is labelled"
        area = view.plot.getViewBox().sceneBoundingRect()
        margin = shown[0].textItem.document().documentMargin()
        boxes = [label.textItem.mapRectToScene(label.textItem.boundingRect()).adjusted(margin, margin, -margin, -margin)
                 for label in shown]  # the text itself, without the document's margins
        assert all(area.contains(box) for box in boxes), "a label is drawn outside the view"
        for a, b in combinations(boxes, 2):
            assert not a.intersects(b), (a, b)
    tips: list[str] = []
    view.plot.getViewBox().setToolTip("")
    for i, (x, y) in enumerate(view.points):  # every token is named on hover, its label shown or not
        under = view.scatter.pointsAt(QPointF(float(x), float(y)))
        view.scatter.sigHovered.emit(view.scatter, under, None)
        tips.append(view.plot.getViewBox().toolTip())
        assert view._tip(i) in tips[-1]


def test_place_labels_keeps_labels_apart() -> None:
    points = np.array([[50.0, 50.0], [52.0, 50.0], [50.0, 53.0], [150.0, 50.0]])
    spots = place_labels(points, np.full((4, 2), (20.0, 10.0)), (0, 0, 200, 100))
    assert spots[0] == (40.0, 50 - 4.5 - 2 - 10) and spots[3] is not None  # above its point; the far one too
    assert spots[1] == (52 + 4.5 + 2, 45.0)  # right: above is taken by a label, below by a point
    placed = [(x, y, x + 20, y + 10) for x, y in (s for s in spots if s is not None)]
    for (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) in combinations(placed, 2):
        assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0
    assert place_labels(points[:1], np.array([[300.0, 10.0]]), (0, 0, 200, 100)) == [None]  # fits nowhere

"""Many runs (issue 31): a large runs folder shows its newest rows from its runs index before the folder has been
read, and lists it with no run database opened on any thread; the sweep gallery of a large sweep decodes the final
images of the cells it draws only — off the GUI thread, into a bounded cache — and draws each cell's own image.

Real records throughout: run folders written by RunWriter (the runs index kept by the writers, as in a large
folder), a sweep study written by StudyWriter whose every member has its own colour."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QModelIndex
from PySide6.QtGui import QImage

from ghostviewer.gui.models import history_model
from ghostviewer.gui.models.history_model import FIRST_CHUNK, HistoryModel
from ghostviewer.gui.models.sweep_model import SweepModel
from ghostviewer.gui.widgets.history_panel import HistoryPanel
from ghostviewer.gui.widgets.sweep_gallery import SweepGallery, _whole_across
from ghostviewer.record import RunRecord, StudyRecord, StudyWriter
from ghostviewer.record.runs_index import ensure
from tests.gui.decode_spy import spy_decodes
from tests.gui.fake_runs import write_listed_run as _run

RUNS = 120  # a "large" folder for these tests (LARGE_FOLDER set below it): read off the GUI thread
PROMPTS, SEEDS = 6, 20  # the sweep: 120 runs, more cells than the gallery shows at once


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder of RUNS runs whose index the writers kept (as a large folder's first listing leaves it)."""
    folder = tmp_path_factory.mktemp("many-runs")
    ensure(folder)
    for k in range(RUNS):
        _run(folder, k, f"prompt {k}", k)
    return folder


def _colour(i: int, seed: int) -> tuple[int, int, int]:
    return (40 * i + 20, 12 * seed + 5, 200 - 30 * i)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished sweep study of PROMPTS × SEEDS real runs, each final image of its own colour."""
    root = tmp_path_factory.mktemp("many-sweep")
    study = StudyWriter.create(root, "sweep", {"seeds": f"0-{SEEDS - 1}"}, total=PROMPTS * SEEDS)
    for i in range(PROMPTS):
        for seed in range(SEEDS):
            run = _run(study.runs_dir, i * SEEDS + seed, f"prompt {i}", seed, _colour(i, seed))
            study.add_run(run, {"prompt": f"prompt {i}", "seed": seed},
                          summary={"status": "done", "verdict": {"label": "ok"}})
    study.finish("done")
    return study.path


@pytest.fixture(autouse=True)
def _large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_model, "LARGE_FOLDER", RUNS // 2)


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Run records ("gui", "other": on the GUI thread, on others) and study records ("study") opened from now
    on (as benchmarks/many_runs.py counts them)."""
    counts = {"gui": 0, "other": 0, "study": 0}
    for cls in (RunRecord, StudyRecord):
        original = cls.__init__

        def counted(self, path, _original=original, _cls=cls) -> None:  # noqa: ANN001 - the records' signature
            if _cls is StudyRecord:
                counts["study"] += 1
            else:
                counts["gui" if threading.current_thread() is threading.main_thread() else "other"] += 1
            _original(self, path)

        monkeypatch.setattr(cls, "__init__", counted)
    return counts


def test_the_newest_rows_show_from_the_index_before_the_folder_is_read(qtbot, many: Path, monkeypatch) -> None:  # noqa: ANN001
    events: list[object] = []
    real_scan = history_model.scan

    def spied_scan(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - scan's own
        events.append("scan")
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(history_model, "scan", spied_scan)
    opens = _count_opens(monkeypatch)
    model = HistoryModel(many)
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    pages: list[list[str]] = []
    model.changed.connect(lambda: events.append(len(model.rows)))
    model.changed.connect(lambda: pages.append([row.path for row in model.rows]))
    model.refresh()
    assert model.loading and model.rows == [], "refresh() reads nothing on the GUI thread"
    qtbot.waitUntil(lambda: not model.loading, timeout=60_000)
    assert events == [FIRST_CHUNK, "scan", RUNS], "a page shown before the folder is read, then every row"
    assert panel.row_count() == RUNS
    first = pages[0]
    assert [row.path for row in model.rows[:FIRST_CHUNK]] == first, "the page was the newest rows, in order"
    assert panel.tree.topLevelItem(0).text(4) == f"prompt {RUNS - 1}"
    assert opens == {"gui": 0, "other": 0, "study": 0}, "listed from the index alone: no run database opened"


def test_a_new_run_the_index_lacks_waits_for_the_read_and_the_page_never_shows_a_gone_run(qtbot, many: Path,  # noqa: ANN001
                                                                                          tmp_path: Path) -> None:
    """The page checks each row's stamp: a run folder removed since its row was written is not shown."""
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(many, folder)
    newest = sorted(p for p in folder.iterdir() if p.is_dir())[-1]
    shutil.rmtree(newest)
    model = HistoryModel(folder)
    pages: list[list[str]] = []
    model.changed.connect(lambda: pages.append([row.path for row in model.rows]))
    model.refresh()
    qtbot.waitUntil(lambda: not model.loading, timeout=60_000)
    assert str(newest) not in pages[0] and len(pages[0]) == FIRST_CHUNK - 1
    assert len(model.rows) == RUNS - 1 and str(newest) not in pages[-1]


def _wait_images(qtbot, model: SweepModel) -> None:  # noqa: ANN001
    qtbot.waitUntil(lambda: not model.images._busy and not model.images._wanted, timeout=20_000)


def _cells_on_screen(gallery: SweepGallery) -> set[str]:
    """The final images of the cells the grid draws."""
    grid, model = gallery.grid, gallery.grid_model
    rect = grid.viewport().rect()
    found = set()
    for r in range(model.rowCount()):
        for c in range(model.columnCount()):
            cell = grid.visualRect(model.index(r, c))
            if cell.intersects(rect) and _whole_across(cell, rect):  # a column cut at the edge is left blank
                found.add(str(Path(model.entry(r, c).run_dir) / "images" / "final.png"))
    return found


def test_the_gallery_decodes_the_cells_it_draws_only_into_a_bounded_cache(qtbot, sweep: Path, monkeypatch) -> None:  # noqa: ANN001
    opens = _count_opens(monkeypatch)
    decoded_on = spy_decodes(monkeypatch)
    model = SweepModel()
    model.images.capacity = 30
    gallery = SweepGallery(model)
    qtbot.addWidget(gallery)
    gallery.resize(520, 300)
    gallery.show()
    qtbot.waitExposed(gallery)
    model.open_study(sweep)
    assert opens["gui"] == opens["other"] == 0 and opens["study"] <= 2, "the study's index read, no run"
    assert model.rowCount() == PROMPTS * SEEDS
    grid = gallery.grid
    qtbot.waitUntil(lambda: model.images.decodes > 0, timeout=20_000)  # the cells drawn asked for their images
    _wait_images(qtbot, model)
    assert decoded_on and not any(decoded_on), "every image decoded off the GUI thread"
    shown = _cells_on_screen(gallery)
    assert 0 < len(shown) < PROMPTS * SEEDS // 2
    assert set(model.images._cache) == shown, "exactly the images of the cells on screen were decoded"
    # what the grid draws: each cell's own final image (its centre has the run's colour), not the placeholder
    grid.viewport().repaint()
    image = grid.viewport().grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
    drawn = 0
    for r in range(gallery.grid_model.rowCount()):
        for c in range(gallery.grid_model.columnCount()):
            cell = grid.visualRect(gallery.grid_model.index(r, c))
            if not grid.viewport().rect().contains(cell):
                continue
            centre = cell.center()
            colour = image.pixelColor(centre.x(), centre.y())
            wanted = _colour(r, gallery.grid_model.seeds[c])
            assert abs(colour.red() - wanted[0]) + abs(colour.green() - wanted[1]) + \
                abs(colour.blue() - wanted[2]) < 12, (r, c, colour.name(), wanted)
            drawn += 1
    assert drawn >= 4
    # scrolled to the end (a page at a time), the cache stays at its bound and holds what is on screen now
    bar = grid.verticalScrollBar()
    for value in range(0, bar.maximum() + 1, max(bar.pageStep(), 1)):
        bar.setValue(value)
        grid.viewport().repaint()
        _wait_images(qtbot, model)
    hbar = grid.horizontalScrollBar()
    hbar.setValue(hbar.maximum())
    grid.viewport().repaint()
    _wait_images(qtbot, model)
    assert len(model.images) <= 30 and model.images.decodes > 30 and not any(decoded_on)
    assert _cells_on_screen(gallery) <= set(model.images._cache)
    assert opens["gui"] == opens["other"] == 0


def test_a_cell_not_decoded_yet_draws_its_placeholder_then_its_image(qtbot, sweep: Path) -> None:  # noqa: ANN001
    model = SweepModel()
    index = model.index(0)
    model.open_study(sweep)
    index = model.index(0)
    assert model.data(index, 1) is None  # DecorationRole: not decoded yet, asked for
    changed: list[QModelIndex] = []
    model.dataChanged.connect(lambda first, _last, _roles: changed.append(first))
    _wait_images(qtbot, model)
    image = model.data(index, 1)
    assert isinstance(image, QImage) and not image.isNull() and changed
    pixel = image.pixelColor(8, 8)
    assert (pixel.red(), pixel.green(), pixel.blue()) == _colour(0, 0)


def test_a_study_run_behind_a_link_out_of_the_study_is_still_refused(tmp_path: Path) -> None:
    """The study's listing no longer resolves each run's path (10,000 of them): a folder that is a link is."""
    from ghostviewer.record import RecordError

    elsewhere = _run(tmp_path / "elsewhere", 0, "p", 0)
    study = StudyWriter.create(tmp_path / "runs", "sweep", {"seeds": "0"}, total=1)
    inside = _run(study.runs_dir, 1, "p", 1)
    study.add_run(inside, {"prompt": "p", "seed": 1}, summary={"status": "done"})
    study.finish("done")
    assert [r.run_dir for r in StudyRecord(study.path).runs()] == [study.path / "runs" / inside.name]
    import shutil

    shutil.rmtree(inside)
    inside.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(RecordError, match="outside its folder"):
        StudyRecord(study.path).runs()


def test_the_views_behind_tabs_are_made_when_their_dock_first_shows(window, qtbot) -> None:  # noqa: ANN001
    """The window does not wait on the views no one sees at start (feature maps, attention, embeddings,
    compare): each is made when its tab is raised — drawn in its dock — or when the code asks for it."""
    window.resize(1366, 768)
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(20)
    assert window._made == {}, "none of the views behind tabs made at start"
    dock = next(d for d in window.docks if d.windowTitle() == "Compare")
    dock.raise_()
    qtbot.waitUntil(lambda: "compare_view" in window._made)
    view = window.compare_view
    assert dock.widget() is view and view.isVisible() and not view.visibleRegion().isEmpty()
    assert sorted(window._made) == ["compare_view"]
    embeddings = window.embeddings  # asked for by the code: made, in its dock, behind its tab still
    assert next(d for d in window.docks if d.windowTitle() == "Embeddings").widget() is embeddings
    assert window.embeddings is embeddings


def test_a_view_a_saved_layout_raises_is_made_at_launch(qtbot, gui_env: Path) -> None:  # noqa: ANN001
    """Quit with the Feature maps tab in front: the next window restores that layout and makes its view."""
    from ghostviewer.gui.app import create_window
    from ghostviewer.gui.app_settings import AppSettings

    first = create_window(AppSettings(), dialogs=False)
    qtbot.addWidget(first)
    first.show()
    qtbot.waitExposed(first)
    next(d for d in first.docks if d.windowTitle() == "Feature maps").raise_()
    qtbot.waitUntil(lambda: "feature_maps" in first._made)
    first.close()
    second = create_window(AppSettings(), dialogs=False)
    qtbot.addWidget(second)
    assert second._made == {}
    second.show()
    qtbot.waitExposed(second)
    qtbot.waitUntil(lambda: "feature_maps" in second._made)
    dock = next(d for d in second.docks if d.windowTitle() == "Feature maps")
    assert dock.widget() is second.feature_maps and not second.feature_maps.visibleRegion().isEmpty()
    assert "compare_view" not in second._made  # still behind its tab
    second.state.controller.shutdown()

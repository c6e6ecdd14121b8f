"""A runs folder of hundreds or thousands of runs opens without freezing the window: the history reads a large
folder off the GUI thread (no record opened on it), newest first, a screenful first and the rest in chunks, and
each chunk only adds its own rows to the tree (the rows already shown keep their items)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ghostviewer.gui.models import history_model
from ghostviewer.gui.models.history_model import FIRST_CHUNK, LARGE_FOLDER, HistoryModel
from ghostviewer.gui.widgets.history_panel import HistoryPanel
from ghostviewer.record import RunRecord, RunWriter
from ghostviewer.record.runs_index import INDEX_FILES, list_rows

RUNS = LARGE_FOLDER + 60


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("many")
    for k in range(RUNS):
        writer = RunWriter.create(folder, {"prompt": f"p{k}", "seed": k, "steps": 1}, {"device": "cpu"},
                                  run_id=f"20261201-{k // 3600:02d}{k // 60 % 60:02d}{k % 60:02d}-{k:06x}")
        writer.finish("done", 0.1)
    return folder


def test_a_large_folder_is_read_off_the_gui_thread_in_chunks(qtbot, many: Path, monkeypatch) -> None:  # noqa: ANN001
    opened_on_gui = []
    original = RunRecord.__init__

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        opened_on_gui.append(threading.current_thread() is threading.main_thread())
        original(self, *args, **kwargs)

    monkeypatch.setattr(RunRecord, "__init__", spy)
    for name in INDEX_FILES:  # a folder from before the runs index (or copied in): every record is read once
        (many / name).unlink(missing_ok=True)
    model = HistoryModel(many)
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    sizes: list[int] = []
    model.changed.connect(lambda: sizes.append(len(model.rows)))
    model.refresh()
    assert model.loading and model.rows == [], "refresh() returns at once: nothing read on the GUI thread yet"
    qtbot.waitUntil(lambda: not model.loading, timeout=60_000)
    assert len(model.entries) == RUNS and panel.row_count() == RUNS
    assert sizes[0] == FIRST_CHUNK and len(sizes) >= 3 and sizes == sorted(sizes), sizes
    assert opened_on_gui and not any(opened_on_gui), "no run database opened on the GUI thread"
    assert model.entries[0].run_id > model.entries[-1].run_id  # newest first
    first_item = panel.tree.topLevelItem(0)
    model.refresh()  # nothing changed: the same rows, the same items
    qtbot.waitUntil(lambda: not model.loading, timeout=60_000)
    assert panel.tree.topLevelItem(0) is first_item and panel.row_count() == RUNS


def test_a_small_folder_is_still_read_in_place(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(history_model, "LARGE_FOLDER", 10)
    RunWriter.create(tmp_path, {"prompt": "p", "seed": 1, "steps": 1}, {"device": "cpu"}).finish("done", 0.1)
    model = HistoryModel(tmp_path)
    model.refresh()
    assert not model.loading and len(model.entries) == 1


def test_a_large_indexed_folder_opens_no_record_and_comes_in_two_steps(qtbot, many: Path, monkeypatch) -> None:  # noqa: ANN001
    """The writer keeps the runs index (record/runs_index.py): the history reads its rows only, shows a screenful
    and then the rest."""
    list_rows(many, create=True)  # the index a first listing makes, up to date
    opened: list[Path] = []
    original = RunRecord.__init__

    def spy(self, path, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        opened.append(path)
        original(self, path, *args, **kwargs)

    model = HistoryModel(many)
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    monkeypatch.setattr(RunRecord, "__init__", spy)
    sizes: list[int] = []
    model.changed.connect(lambda: sizes.append(len(model.rows)))
    model.set_runs_dir(many)
    qtbot.waitUntil(lambda: not model.loading, timeout=60_000)
    assert opened == [] and sizes == [FIRST_CHUNK, RUNS] and panel.row_count() == RUNS


def test_a_refresh_keeps_the_column_widths_the_filter_and_the_current_row(qtbot, many: Path) -> None:  # noqa: ANN001
    """The history is a model/view: a refresh resets its rows, and puts back what the user set on them."""
    list_rows(many, create=True)
    model = HistoryModel(many)
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    model.refresh()
    qtbot.waitUntil(lambda: not model.loading and panel.row_count() == RUNS, timeout=60_000)
    panel.tree.setColumnWidth(4, 300)
    panel.filter.setText("p4")  # p4, p40-p49, p400-p459
    assert panel.shown_count() == 1 + 10 + 60
    picked = next(i for i in panel._items() if not i.isHidden() and i.text(4) == "p42")
    panel.tree.setCurrentItem(picked)
    model._cache = {}  # every row read again: new row objects, the same folders
    model.refresh()
    qtbot.waitUntil(lambda: not model.loading, timeout=60_000)
    assert panel.tree.columnWidth(4) == 300 and panel.shown_count() == 71
    assert panel.tree.currentItem() is picked and panel.tree.currentItem().text(4) == "p42"
    assert panel.tree.topLevelItem(RUNS - 1).isHidden() and not picked.isHidden()

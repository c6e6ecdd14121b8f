"""Many runs (issue 31), what is read and where: a live sweep's refresh reads only the index rows added since the
last read; a large sweep's index is read on the gallery model's worker (its grid made there too) and shows the
same runs, cells and statistics as a small one read in place; a large runs folder is read once from its index
(a refresh while its first read is under way does not start it again), its rows in order and filtered; the
history's thumbnails are decoded off the GUI thread, for the rows drawn only. Work is counted (reads, rows, opens,
decodes), never timed.

Real records throughout: runs written by RunWriter (the runs index kept by the writers), sweeps by StudyWriter."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ghostviewer.gui.models import history_model, sweep_model
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.sweep_model import RUN_DIR, SweepGridModel, SweepModel, grid_of
from ghostviewer.gui.widgets.history_panel import HistoryPanel
from ghostviewer.record import RunRecord, StudyRecord, StudyWriter
from ghostviewer.record.runs_index import ensure
from tests.gui.decode_spy import spy_decodes
from tests.gui.fake_runs import write_listed_run as _run
from tests.gui.fake_runs import write_listed_runs
from tests.gui.history_panels import shown_history

RUNS = 90  # a "large" folder here (LARGE_FOLDER set below it)
PROMPTS, SEEDS = 3, 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RUNS runs whose index the writers kept; every 9th is a nan run."""
    runs = tmp_path_factory.mktemp("many-reads")
    ensure(runs)
    write_listed_runs(runs, RUNS)
    return runs


def _sweep(root: Path, runs: int) -> StudyWriter:
    study = StudyWriter.create(root, "sweep", {"seeds": f"0-{SEEDS - 1}"}, total=PROMPTS * SEEDS)
    _add(study, 0, runs)
    return study


def _add(study: StudyWriter, start: int, stop: int) -> None:
    for k in range(start, stop):
        prompt, seed = f"prompt {k // SEEDS}", k % SEEDS
        run = _run(study.runs_dir, k, prompt, seed, nan=seed == 3)
        study.add_run(run, {"prompt": prompt, "seed": seed},
                      summary={"status": "done", "verdict": {"label": "nan" if seed == 3 else "ok"}})


def _spy_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """(index rows returned, on the GUI thread) for each StudyRecord.runs() call from now on."""
    calls: list[tuple[int, bool]] = []
    original = StudyRecord.runs

    def spied(self: StudyRecord, after: int | None = None) -> list:
        rows = original(self, after)
        calls.append((len(rows), threading.current_thread() is threading.main_thread()))
        return rows

    monkeypatch.setattr(StudyRecord, "runs", spied)
    return calls


def test_a_live_sweep_reads_only_the_index_rows_added_since_the_last_read(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    study = _sweep(tmp_path, 5)
    calls = _spy_runs(monkeypatch)
    model = SweepModel(synchronous=True)
    grid = SweepGridModel(model)
    model.open_study(study.path)
    assert [e.seed for e in model.entries] == [0, 1, 2, 3, 0] and model.rows_read == 5
    resets = {"list": 0, "grid": 0}
    model.modelReset.connect(lambda: resets.__setitem__("list", resets["list"] + 1))
    grid.modelReset.connect(lambda: resets.__setitem__("grid", resets["grid"] + 1))
    _add(study, 5, 7)
    model.refresh()
    model.refresh()  # nothing new: no row read
    assert [n for n, _ in calls] == [5, 2, 0] and model.rows_read == 7
    assert [e.position for e in model.entries] == list(range(7)) and model.rowCount() == 7
    assert model.stats.total == 7 and model.stats.failed == 1  # seed 3 of prompt 0 only
    _add(study, 7, PROMPTS * SEEDS)
    study.finish("done")
    model.refresh()
    assert calls[-1][0] == 5 and model.rows_read == PROMPTS * SEEDS and model.status == "done"
    assert resets == {"list": 0, "grid": 0}, "new runs are added at the end: nothing laid out again"
    assert model.prompts() == ["prompt 0", "prompt 1", "prompt 2"] and model.number("prompt 2") == 3
    assert model.verdicts() == ["nan", "ok"]
    fresh = SweepModel(synchronous=True)
    fresh_grid = SweepGridModel(fresh)
    fresh.open_study(study.path)  # the same runs, table and statistics as one read whole
    assert fresh.entries == model.entries and fresh.stats.to_json() == model.stats.to_json()
    assert (grid.prompts, grid.seeds, grid._cells) == (fresh_grid.prompts, fresh_grid.seeds, fresh_grid._cells)
    assert [model.data(model.index(r), RUN_DIR) for r in range(model.rowCount())] == \
        [fresh.data(fresh.index(r), RUN_DIR) for r in range(fresh.rowCount())]
    model.set_filter(verdict="nan")
    model.set_filter(verdict="")  # laid out again from every run: the same table
    assert (grid.prompts, grid.seeds, grid._cells) == (fresh_grid.prompts, fresh_grid.seeds, fresh_grid._cells)


def test_a_large_sweep_is_read_off_the_gui_thread_with_its_grid(qtbot, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(sweep_model, "LARGE_STUDY", 4)
    study = _sweep(tmp_path, 10)
    calls = _spy_runs(monkeypatch)
    model = SweepModel()
    grid = SweepGridModel(model)
    model.open_study(study.path)
    assert model.loading and model.entries == [] and calls == [], "open_study returns before the index is read"
    qtbot.waitUntil(lambda: not model.loading, timeout=20_000)
    assert calls == [(10, False)], "the index read once, on the worker"
    assert model.rowCount() == 10 and (grid.rowCount(), grid.columnCount()) == (3, SEEDS)
    made = grid_of(model.shown(), model.prompts())  # the table the worker made is the one made here
    assert (grid.prompts, grid.seeds) == (made.prompts, made.seeds) and grid._cells == made.cells
    assert grid.entry(2, 1).prompt == "prompt 2" and grid.entry(2, 1).seed == 1 and grid.entry(2, 2) is None
    model.set_filter(verdict="failed")  # filtered: the grid made on the GUI thread from the shown runs
    assert model.rowCount() == 2 and (grid.rowCount(), grid.columnCount()) == (2, 1)
    model.set_filter(verdict="")
    _add(study, 10, PROMPTS * SEEDS)
    model.refresh()  # a large live sweep: the new rows only, on the worker
    qtbot.waitUntil(lambda: not model.loading, timeout=20_000)
    assert calls[1:] == [(2, False)] and model.rows_read == PROMPTS * SEEDS
    assert (grid.rowCount(), grid.columnCount()) == (PROMPTS, SEEDS) and grid.entry(2, 3).seed == 3


def test_a_large_folder_is_read_once_from_its_index(qtbot, folder: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(history_model, "LARGE_FOLDER", RUNS // 2)
    reads = {"page": 0, "scan": 0}
    opened: list[bool] = []
    for name in reads:
        original = getattr(history_model, {"page": "first_page", "scan": "scan"}[name])

        def spied(*args, _original=original, _name=name, **kwargs):  # noqa: ANN002, ANN003, ANN202
            reads[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(history_model, {"page": "first_page", "scan": "scan"}[name], spied)
    original_init = RunRecord.__init__

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        opened.append(threading.current_thread() is threading.main_thread())
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(RunRecord, "__init__", spy)
    model = HistoryModel(folder)
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    model.refresh()
    assert model.loading and model.rows == [], "read off the GUI thread"
    model.refresh()  # a second refresh while the first read is under way: that read answers both
    qtbot.waitUntil(lambda: not model.loading, timeout=30_000)
    assert reads == {"page": 1, "scan": 1} and opened == [], "read once, from the runs index, no record opened"
    assert panel.row_count() == RUNS and len(model.entries) == RUNS
    assert [e.prompt for e in model.entries[:3]] == [f"a red circle #{k}" for k in (RUNS - 1, RUNS - 2, RUNS - 3)]
    panel.filter.setText("nan")
    assert panel.shown_count() == len(range(0, RUNS, 9))
    panel.filter.setText("circle #8")  # #8, #80-#89
    assert panel.shown_count() == 11
    model.refresh()  # a later refresh reads again (stamps only: nothing opened)
    qtbot.waitUntil(lambda: not model.loading, timeout=30_000)
    assert reads["scan"] == 2 and opened == [] and panel.row_count() == RUNS and panel.shown_count() == 11


def test_the_historys_thumbnails_are_decoded_off_the_gui_thread_for_the_rows_drawn(qtbot, folder: Path,  # noqa: ANN001
                                                                                 monkeypatch) -> None:
    monkeypatch.setattr(history_model, "LARGE_FOLDER", RUNS // 2)
    decoded_on = spy_decodes(monkeypatch)
    model, panel = shown_history(qtbot, folder, (600, 300))
    qtbot.waitUntil(lambda: not model.loading and panel.row_count() == RUNS, timeout=30_000)
    qtbot.waitUntil(lambda: bool(panel.rows._thumbs) and not panel.rows._waiting, timeout=20_000)
    assert decoded_on and not any(decoded_on), "every thumbnail decoded on the worker"
    assert len(decoded_on) < RUNS // 2, "only the rows drawn ask for theirs"
    top = panel.rows.index(0, 0)
    icon = panel.rows.data(top, 1)  # DecorationRole, as the view asks
    assert icon is not None and not icon.isNull() and icon.availableSizes()

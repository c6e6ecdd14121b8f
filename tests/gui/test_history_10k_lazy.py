"""Many runs (issue 31): a big runs folder fills the history with no row's words made until the row is drawn —
the right rows, in order, with a study among them — and the filter's first pass formats nothing on the GUI thread
(the worker made every row's search text once the rows were shown). No run database is opened on the GUI thread.

A scripted folder of real records (RunWriter, the runs index kept by the writers) stands in for 10,000 runs:
LARGE_FOLDER is set below its size, so it takes the large folder's path (benchmarks/many_runs.py times it)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ghostviewer.gui.models import history_lines, history_model
from ghostviewer.gui.models.history_model import HistoryModel, RunEntry, StudyEntry
from ghostviewer.gui.widgets.history_panel import HistoryPanel
from ghostviewer.record import RunRecord, StudyRecord, StudyWriter
from ghostviewer.record.runs_index import ensure
from tests.gui.fake_runs import write_listed_run, write_listed_runs
from tests.gui.history_panels import shown_history

RUNS = 150
SEEDS = 4  # the study's runs


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RUNS runs (every 9th judged nan), then a sweep study of SEEDS runs: the newest row."""
    root = tmp_path_factory.mktemp("big-history")
    ensure(root)
    write_listed_runs(root, RUNS)
    study = StudyWriter.create(root, "sweep", {"seeds": f"0-{SEEDS - 1}"}, total=SEEDS)
    for seed in range(SEEDS):
        run = write_listed_run(study.runs_dir, seed, "a blue star", seed)
        study.add_run(run, {"seed": seed}, summary={"status": "done", "verdict": {"label": "ok"}})
    study.finish("done")
    return root


@pytest.fixture(autouse=True)
def _large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_model, "LARGE_FOLDER", RUNS // 3)


@pytest.fixture
def gui_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The records (run or study) opened on the GUI thread from now on."""
    opened: list[str] = []
    for cls in (RunRecord, StudyRecord):
        original = cls.__init__

        def counted(self, path, _original=original) -> None:  # noqa: ANN001 - the records' own signature
            if threading.current_thread() is threading.main_thread():
                opened.append(str(path))
            _original(self, path)

        monkeypatch.setattr(cls, "__init__", counted)
    return opened


def _open(qtbot, folder: Path) -> tuple[HistoryModel, HistoryPanel]:  # noqa: ANN001 - qtbot
    model, panel = shown_history(qtbot, folder)
    qtbot.waitUntil(lambda: not model.loading and panel.row_count() == RUNS + 1, timeout=60_000)
    qtbot.waitUntil(lambda: model.listing is not None and model.listing.search is not None, timeout=30_000)
    return model, panel


def test_a_big_folder_fills_in_order_and_formats_only_the_rows_drawn(qtbot, folder: Path,  # noqa: ANN001
                                                                      gui_opens: list[str]) -> None:
    model, panel = _open(qtbot, folder)
    assert gui_opens == [], "no run or study database opened on the GUI thread"
    assert len(model.entries) == RUNS and len(model.studies) == 1
    assert isinstance(model.rows[0], StudyEntry), "the study was made last: the newest row"
    runs = [row for row in model.rows if isinstance(row, RunEntry)]
    assert [row.prompt for row in runs[:3]] == [f"a red circle #{k}" for k in (RUNS - 1, RUNS - 2, RUNS - 3)]
    assert [row.created for row in runs] == sorted((row.created for row in runs), reverse=True)
    lines = panel.rows.lines
    qtbot.waitUntil(lambda: lines.formatted > 0, timeout=5_000)  # the rows on screen, drawn
    drawn = lines.formatted
    on_screen = panel.tree.viewport().height() // panel.tree.sizeHintForRow(0) + 2
    assert drawn <= on_screen < RUNS // 4, f"{drawn} lines made for about {on_screen} rows on screen"
    study, newest = panel.tree.topLevelItem(0), panel.tree.topLevelItem(1)
    assert study.text(4).startswith("sweep") and study.text(3).endswith(f"/{SEEDS}") and study.childCount() == SEEDS
    assert newest.text(4) == f"a red circle #{RUNS - 1}" and newest.text(2) == str(RUNS - 1)
    assert panel.tree.topLevelItem(RUNS).text(4) == "a red circle #0" and panel.tree.topLevelItem(RUNS).text(1) == "nan"


def test_the_filters_first_pass_formats_nothing_and_finds_runs_and_a_studys_run(qtbot, folder: Path,  # noqa: ANN001
                                                                                gui_opens: list[str]) -> None:
    _model, panel = _open(qtbot, folder)
    lines = panel.rows.lines
    before = lines.formatted
    panel.filter.setText("nan")  # the filter's pass itself (the rows it leaves are drawn at the next paint)
    assert lines.formatted == before, "searched with the worker's texts: no line made for it"
    assert panel.shown_count() == len(range(0, RUNS, 9))
    shown = [panel.tree.topLevelItem(k) for k in range(panel.row_count())]
    assert {item.text(4) for item in shown if not item.isHidden()} == {f"a red circle #{k}" for k in range(0, RUNS, 9)}
    panel.filter.setText("seed 2")  # a run of the study only: the study shown with that run
    assert panel.shown_count() == 1
    study = panel.tree.topLevelItem(0)
    kept = [study.child(j) for j in range(study.childCount()) if not study.child(j).isHidden()]
    assert [child.text(2) for child in kept] == ["2"]
    panel.filter.setText("")
    assert panel.shown_count() == RUNS + 1
    assert gui_opens == []


def test_a_refresh_makes_words_again_only_for_the_new_run(qtbot, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A refresh keeps the rows unchanged (the same objects): their lines and search texts are kept, and only the
    run written since is formatted and searched."""
    ensure(tmp_path)
    count = RUNS // 3 + 10
    for k in range(count):
        write_listed_run(tmp_path, k, f"a green square #{k}", k)
    searched: list[str] = []
    real = history_lines.search_of

    def spied(row, live_run):  # noqa: ANN001, ANN202 - search_of's own
        searched.append(row.path)
        return real(row, live_run)

    monkeypatch.setattr(history_lines, "search_of", spied)
    model, panel = shown_history(qtbot, tmp_path)
    qtbot.waitUntil(lambda: not model.loading and model.listing is not None and model.listing.search is not None,
                    timeout=60_000)
    assert len(searched) == count
    qtbot.waitUntil(lambda: panel.rows.lines.formatted > 0, timeout=5_000)
    searched.clear()
    new = write_listed_run(tmp_path, count, "a new run", 1)
    model.refresh()
    qtbot.waitUntil(lambda: not model.loading and panel.row_count() == count + 1 and model.listing is not None
                    and model.listing.search is not None, timeout=60_000)
    assert searched == [str(new)], "only the new run's search text made"
    lines = panel.rows.lines
    qtbot.waitUntil(lambda: lines.formatted > 0, timeout=5_000)
    qtbot.wait(50)
    assert lines.formatted == 1 and lines[0].texts[4] == "a new run", "the rows drawn before kept their lines"
    panel.filter.setText("new run")
    assert panel.shown_count() == 1 and len(searched) == 1


def test_the_workers_search_texts_give_way_to_the_live_run_for_the_rows_it_changes() -> None:
    """The worker makes each row's search text with no live run; a run shown live reads 'running', not
    'incomplete', for the filter too (its text made again; the others taken as they are)."""
    def run(name: str, status: str) -> RunEntry:
        return RunEntry(f"/runs/{name}", name, "2026-12-01T10:00:00+00:00", f"prompt {name}", 1, 2, status, "ok",
                        None)

    rows: list = [run("b", "running"), run("a", "done")]
    search, studies, sensitive = history_lines.searches(rows)
    assert sensitive == [0] and "incomplete" in search[0]
    listing = history_lines.Listing(rows, {}, {}, search, studies, sensitive)
    live = history_lines.Lines(rows, "/runs/b", listing=listing)
    texts = live.all_search()
    assert "running" in texts[0] and "incomplete" not in texts[0] and texts[1] is search[1]
    assert history_lines.Lines(rows, None, listing=listing).all_search() is search and live.formatted == 0


def test_a_small_folder_never_read_opens_a_few_records_in_place_and_the_rest_off_the_gui_thread(
        qtbot, tmp_path: Path, monkeypatch, gui_opens: list[str]) -> None:  # noqa: ANN001
    """No runs index below LARGE_FOLDER entries: a first launch on hundreds of runs opened every record on the GUI
    thread (~1 s). Now IN_PLACE_OPENS at most, the newest; the others come from the worker."""
    monkeypatch.setattr(history_model, "IN_PLACE_OPENS", 3)
    for k in range(8):
        write_listed_run(tmp_path, k, f"a small folder's run #{k}", k)
    model = HistoryModel(tmp_path)
    model.refresh()
    assert [row.prompt for row in model.rows] == [f"a small folder's run #{k}" for k in (7, 6, 5)]
    assert model.loading and len(gui_opens) == 3, "three records opened in place, the newest"
    qtbot.waitUntil(lambda: not model.loading, timeout=30_000)
    assert [row.prompt for row in model.rows] == [f"a small folder's run #{k}" for k in range(7, -1, -1)]
    assert len(gui_opens) == 3, "the other five opened off the GUI thread"
    model.refresh()  # read once: in place again, from the cache (nothing opened)
    assert not model.loading and len(model.rows) == 8 and len(gui_opens) == 3
    model.shutdown()

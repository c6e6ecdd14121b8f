"""The Runs history shows the calls a watcher recorded in the user's own program: a watch study is one row (its
program, calls, failures, kept records), its kept calls its children ("call N · prompt", the whole source in
their tooltips; a watched run listed on its own says "[watched: prog · call N]"), and picking it opens its failed
call. File ▸ Watch folder follows a folder a program writes into: a call made after the
mode started appears within seconds, read off the GUI thread, and the current row and the scroll position survive
each refresh. Real watched calls of the real demo pipeline, real SQLite, real widgets."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
import torch
from PySide6.QtWidgets import QApplication

import ghostviewer
from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.coordinators.folder_watch import FolderWatch
from ghostviewer.gui.models.history_model import HistoryModel, StudyEntry
from ghostviewer.gui.widgets.history_panel import BAD_COLOUR, KIND_ROLE, PATH_ROLE, HistoryPanel
from ghostviewer.record import RunRecord
from tests.gui.fake_runs import write_fake_run

PROGRAM = os.path.basename(sys.argv[0] or "python")  # what the watcher records as the program
PROMPT = "a red circle on a blue background"
NAN = torch.full((1, 4, 16, 16), float("nan"))


def _calls(pipe, watcher_dir: Path, nan: tuple[bool, ...]):  # noqa: ANN001, ANN202 - a Watcher
    """Watched calls of 2 steps into `watcher_dir` (NaN initial latents where asked: a bad call)."""
    with ghostviewer.watch(pipe, runs_dir=watcher_dir) as watcher:
        for i, bad in enumerate(nan):
            pipe(PROMPT, num_inference_steps=2, generator=torch.Generator().manual_seed(i), output_type="np",
                 **({"latents": NAN} if bad else {}))
    return watcher


@pytest.fixture(scope="module")
def watched(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder holding one watch study: a healthy call, then a NaN one."""
    folder = tmp_path_factory.mktemp("watched")
    watcher = _calls(demo_loaded.pipe, folder, (False, True))
    assert watcher.summary()["calls"] == 2 and watcher.summary()["failed"] == 1
    return folder


def test_a_watch_study_is_one_row_and_its_kept_calls_say_where_they_were_made(qtbot, watched: Path) -> None:  # noqa: ANN001
    model = HistoryModel(watched)
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    model.refresh()
    (study,) = model.rows
    assert isinstance(study, StudyEntry) and study.kind == "watch" and study.source == PROGRAM
    assert study.failed == 1 and study.state(None) == "done"
    top = panel.tree.topLevelItem(0)
    assert panel.row_count() == 1 and top.data(0, KIND_ROLE) == "study"
    assert top.text(4) == f"watch {PROGRAM}: 1/2 failed (50%), 2 kept" and top.text(1) == "1/2 failed"
    assert top.foreground(1).color().name() == BAD_COLOUR and top.toolTip(1).startswith("done: ")
    assert top.text(3) == "2" and top.foreground(4).color().name() == BAD_COLOUR
    assert top.childCount() == 2
    newest, oldest = top.child(0), top.child(1)  # newest call first
    assert newest.text(4) == f"call 1 · {PROMPT}" and oldest.text(4) == f"call 0 · {PROMPT}"
    assert newest.toolTip(4).startswith(f"[watched: {PROGRAM} · call 1] {PROMPT}")
    assert len(newest.text(0)) == len("12:26:11")  # the call's time (the study row has the date)
    assert newest.text(1) == "nan" and newest.foreground(1).color().name() == BAD_COLOUR
    assert oldest.text(2) == "0" and oldest.text(3) == "2"  # its seed and steps, read from its record
    assert RunRecord(str(newest.data(0, PATH_ROLE))).environment["watched"]["call"] == 1
    with qtbot.waitSignal(panel.runSelected, timeout=1000) as picked:
        panel.tree.setCurrentItem(oldest)
    assert picked.args == [str(oldest.data(0, PATH_ROLE))]


def test_a_watched_run_listed_on_its_own_says_its_source(qtbot, watched: Path) -> None:  # noqa: ANN001
    (study_dir,) = [p for p in watched.iterdir() if p.is_dir()]
    model = HistoryModel(study_dir / "runs")  # the study's own runs folder shown as a runs folder
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    model.refresh()
    texts = sorted(panel.tree.topLevelItem(i).text(4) for i in range(panel.row_count()))
    assert texts == [f"[watched: {PROGRAM} · call {n}] {PROMPT}" for n in (0, 1)]


def test_picking_a_watch_study_opens_its_failed_call(window, qtbot, watched: Path) -> None:  # noqa: ANN001
    state, panel = window.state, window.history_panel
    state.history.set_runs_dir(watched)
    top = panel.tree.topLevelItem(0)
    failed = top.child(0).data(0, PATH_ROLE)
    panel.tree.setCurrentItem(top)
    qtbot.waitUntil(lambda: state.timeline.run_dir is not None, timeout=10_000)
    assert Path(state.timeline.run_dir) == Path(failed)
    assert Path(str(panel.tree.currentItem().data(0, PATH_ROLE))) == Path(failed)  # the call's row is current


def test_watch_folder_shows_new_calls_as_they_are_written(window, qtbot, demo_loaded, tmp_path: Path,  # noqa: ANN001
                                                          gui_env: Path) -> None:
    state, panel, watch = window.state, window.history_panel, window.folder_watch
    window.resize(1366, 768)
    window.show()
    folder = tmp_path / "service-runs"
    folder.mkdir()
    for k in range(40):  # older runs, enough to scroll
        write_fake_run(folder, steps=1, seed=k, run_id=f"20250101-10{k:02d}00-{k:06x}")
    assert watch.start(folder) and state.history.watched == folder
    assert window.actions.watch_folder.isChecked() and not panel.watching.isHidden()
    qtbot.waitUntil(lambda: panel.row_count() == 40, timeout=10_000)
    QApplication.processEvents()
    tree = panel.tree
    picked = tree.topLevelItem(20)
    tree.setCurrentItem(picked)
    tree.scrollToItem(picked)
    bar = tree.verticalScrollBar()
    assert bar.value() > 0
    QApplication.processEvents()
    anchor = tree.itemAt(2, 2)
    anchor_path, anchor_y = anchor.data(0, PATH_ROLE), tree.visualItemRect(anchor).top()

    read_on: list[bool] = []
    original = RunRecord.__init__

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        read_on.append(threading.current_thread() is threading.main_thread())
        original(self, *args, **kwargs)

    RunRecord.__init__ = spy  # type: ignore[method-assign]
    watcher = ghostviewer.attach(demo_loaded.pipe, runs_dir=folder)  # the program, still running
    try:
        demo_loaded.pipe(PROMPT, num_inference_steps=2, generator=torch.Generator().manual_seed(0),
                         output_type="np", latents=NAN)  # it calls its pipeline: a NaN call
        live = f"watching {PROGRAM}: 1/1 failed (100%), 1 kept"  # the study's index, row and result written
        qtbot.waitUntil(lambda: tree.topLevelItem(0).text(4) == live, timeout=5_000)  # as the call ends
        QApplication.processEvents()
        study = tree.topLevelItem(0)
        assert study.isExpanded() and study.childCount() == 1
    finally:
        watcher.detach()
        RunRecord.__init__ = original  # type: ignore[method-assign]
    qtbot.waitUntil(lambda: tree.topLevelItem(0).text(4).startswith("watch "), timeout=5_000)  # it ended
    QApplication.processEvents()
    assert read_on and not any(read_on), "the watched folder is read off the GUI thread"
    assert tree.topLevelItem(0) is study, "updated in place"
    assert panel.row_count() == 41 and study.data(0, KIND_ROLE) == "study"
    assert study.text(4) == f"watch {PROGRAM}: 1/1 failed (100%), 1 kept" and study.text(1) == "1/1 failed"
    assert study.childCount() == 1 and study.child(0).text(1) == "nan"
    assert study.child(0).foreground(1).color().name() == BAD_COLOUR  # the bad call in red at once
    assert tree.currentItem().data(0, PATH_ROLE) == picked.data(0, PATH_ROLE), "the current row stays"
    anchor = panel._item_of(str(anchor_path))
    assert tree.itemAt(2, 2) is anchor and tree.visualItemRect(anchor).top() == anchor_y, "the view did not move"
    assert state.timeline.run_dir is None or Path(state.timeline.run_dir) != Path(study.child(0).data(0, PATH_ROLE))

    first = study.child(0)
    _calls(demo_loaded.pipe, folder, (False,))  # a second program run: a second watch study
    qtbot.waitUntil(lambda: sum(isinstance(r, StudyEntry) for r in state.history.rows) == 2, timeout=5_000)
    QApplication.processEvents()
    assert tree.topLevelItem(1) is study and study.child(0) is first, "rows shown before keep their items"
    assert tree.currentItem().data(0, PATH_ROLE) == picked.data(0, PATH_ROLE)

    watch.stop()
    assert state.history.watched is None and state.history.runs_dir == gui_env
    assert not window.actions.watch_folder.isChecked() and panel.watching.isHidden()
    assert state.settings.watch_folder() == (folder, False)


def test_the_watch_is_remembered_and_resumes(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    settings = AppSettings(tmp_path / "settings.ini")
    folder = tmp_path / "watched"
    folder.mkdir()
    history = HistoryModel(tmp_path)
    watch = FolderWatch(history, settings)
    assert not watch.start(tmp_path / "missing")
    assert watch.start(folder) and settings.watch_folder() == (folder, True)
    history.set_runs_dir(tmp_path)  # Runs folder… chosen meanwhile: the watch ends
    assert watch.folder is None and settings.watch_folder() == (folder, False)
    watch.start(folder)
    history.shutdown()  # the window closes while watching

    again = HistoryModel(tmp_path)
    FolderWatch(again, AppSettings(tmp_path / "settings.ini")).restore()
    assert again.watched == folder and again.runs_dir == folder
    again.shutdown()


def test_a_watch_whose_program_died_reads_interrupted(tmp_path: Path) -> None:
    from ghostviewer.gui.models.history_model import scan
    from ghostviewer.record import StudyWriter

    writer = StudyWriter.create(tmp_path, "watch", {"program": "app.py --port 8000"})
    rows, cache, _ = scan(tmp_path, {})
    assert rows[0].state(None) == "watching" and rows[0].source == "app.py"
    assert scan(tmp_path, cache)[0][0] is rows[0]  # unchanged: from the cache
    writer._lock.release()  # the program killed: its lock gone with it, its database untouched
    (again,), _, _ = scan(tmp_path, cache)
    assert again.state(None) == "interrupted"
    writer.close()

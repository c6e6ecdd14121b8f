"""Hostile and broken run folders in the window (issue 14 item 4): each is made from a REAL recorded demo run
(made once for the module, tests/gui/demo_runs.py), copied and corrupted. Whatever the
record refuses is one line — in the status bar or inside the view — never the crash dialog nor a modal box, and
the history lists every such folder with its problem instead of dropping it."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from ghostviewer.gui import messages
from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.models.history_model import BrokenEntry, HistoryModel, RunEntry
from ghostviewer.gui.widgets.history_panel import KIND_ROLE, PATH_ROLE, UNREADABLE_COLOUR, HistoryPanel
from tests.gui.demo_runs import demo_run
from tests.gui.live_window import needs_demo

pytestmark = needs_demo


def _truncate_db(run: Path) -> None:
    db = run / "run.sqlite"
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 3])


def _garbage_step(run: Path) -> None:
    conn = sqlite3.connect(run / "run.sqlite")
    conn.execute("UPDATE blobs SET data = ? WHERE name = 'step_0001'", (b"\xff\x00garbage" * 40,))
    conn.commit()
    conn.close()


def _symlink_final(run: Path) -> None:
    (run / "images" / "final.png").unlink()
    (run / "images" / "final.png").symlink_to("/etc/hostname")


def _escaping_row(run: Path) -> None:
    conn = sqlite3.connect(run / "run.sqlite")
    conn.execute("INSERT OR REPLACE INTO files (name, kind, relpath, step) VALUES ('final', 'image', '../../x', NULL)")
    conn.commit()
    conn.close()


# name: (corruption, what the history says of it (None: a readable run, listed as usual))
BROKEN: dict[str, tuple[Callable[[Path], None], str | None]] = {
    "truncated-db": (_truncate_db, "corrupt run database"),
    "missing-db": (lambda run: (run / "run.sqlite").unlink(), "no run.sqlite"),
    "garbage-step": (_garbage_step, None),
    "no-final": (lambda run: (run / "images" / "final.png").unlink(), None),
    "symlink-final": (_symlink_final, "outside its folder: images/final.png"),
    "escaping-row": (_escaping_row, "outside its folder: ../../x"),
}
# name: what the window says when the run is picked, and where ("status": the status bar, "view": step images)
SAID = {
    "truncated-db": ("status", "corrupt run database"),
    "missing-db": ("status", "no run.sqlite"),
    "garbage-step": ("view", "step 1: run"),  # "⚠ step 1: run … has an unreadable tensor file …"
    "no-final": ("view", messages.FINAL_NONE),
    "symlink-final": ("view", "final image refused: run"),
    "escaping-row": ("view", "final image refused: run"),
}


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_run(tmp_path_factory, tmp_path_factory.mktemp("broken-source"), "red circle", steps=2)


def _broken_folder(real_run: Path, runs: Path) -> Path:
    """A runs folder holding one good run and one copy of it per corruption (folder names are the BROKEN keys)."""
    runs.mkdir()
    shutil.copytree(real_run, runs / "good", symlinks=True)
    for name, (corrupt, _said) in BROKEN.items():
        shutil.copytree(real_run, runs / name, symlinks=True)
        (runs / name / "run.lock").unlink(missing_ok=True)  # no writer holds a copy
        corrupt(runs / name)
    return runs


@pytest.fixture
def broken(real_run: Path, tmp_path: Path) -> Path:
    return _broken_folder(real_run, tmp_path / "runs")


def _window(settings: Path, runs: Path) -> object:
    """A shown window (no engine) whose reporter opens real dialogs: any modal box would be seen."""
    from ghostviewer.gui.app import create_window

    window = create_window(AppSettings(settings), dialogs=True)
    window.state.history.set_runs_dir(runs)
    window.resize(1366, 768)
    window.show()
    return window


def _close(window) -> None:  # noqa: ANN001
    window.state.step_data.shutdown()
    window.state.controller.shutdown()


@pytest.fixture
def win(qtbot, broken: Path, tmp_path: Path) -> Iterator:  # noqa: ANN001
    window = _window(tmp_path / "settings.ini", broken)
    qtbot.addWidget(window)
    qtbot.waitExposed(window)
    yield window
    _close(window)


@pytest.fixture(scope="module")
def picking(qapp, real_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:  # noqa: ANN001
    """One window and one broken folder (only read) for every pick below: each starts from the good run shown, as a
    user goes from one run to the next."""
    root = tmp_path_factory.mktemp("broken-picking")
    runs = _broken_folder(real_run, root / "runs")
    window = _window(root / "settings.ini", runs)
    yield window, runs
    _close(window)
    window.close()
    window.deleteLater()


def no_dialog(window) -> bool:  # noqa: ANN001
    return QApplication.activeModalWidget() is None and window.state.reporter._open == []


def settle(qtbot, window) -> None:  # noqa: ANN001
    qtbot.waitUntil(lambda: window.state.step_data.idle and not window.step_images.final_loading, timeout=10_000)


def test_the_history_lists_every_broken_folder_with_its_problem(qtbot, broken: Path) -> None:  # noqa: ANN001
    model = HistoryModel(broken)
    model.refresh()
    rows = {Path(row.path).name: row for row in model.rows}
    assert set(rows) == {"good", *BROKEN}  # nothing dropped
    for name, (_corrupt, said) in BROKEN.items():
        row = rows[name]
        if said is None:
            assert isinstance(row, RunEntry) and row.problem == "", name
        elif name.endswith("-db"):
            assert isinstance(row, BrokenEntry) and said in row.problem and "\n" not in row.problem, name
        else:  # read, but for its final image: a run row, with why
            assert isinstance(row, RunEntry) and said in row.problem and row.prompt == "red circle", name
    assert {Path(b.path).name for b in model.broken} == {"missing-db", "truncated-db"}
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    items = {Path(panel.tree.topLevelItem(i).data(0, PATH_ROLE)).name: panel.tree.topLevelItem(i)
             for i in range(panel.tree.topLevelItemCount())}
    item = items["truncated-db"]
    assert item.data(0, KIND_ROLE) == "broken" and item.text(1) == "unreadable"
    assert item.text(4).startswith("⚠ unreadable: corrupt run database truncated-db/run.sqlite")
    assert item.foreground(4).color().name() == UNREADABLE_COLOUR
    assert "database disk image is malformed" in item.toolTip(4) and str(broken / "truncated-db") in item.toolTip(4)
    assert items["symlink-final"].text(1).startswith("⚠ ") and "outside its folder" in items["symlink-final"].toolTip(1)
    said: list[str] = []
    opened: list[str] = []
    panel.messageRequested.connect(said.append)
    panel.runSelected.connect(opened.append)
    panel.select(str(broken / "truncated-db"))  # picking it says why, and opens nothing
    assert opened == [] and len(said) == 1 and said[0].startswith("Run truncated-db: corrupt run database")
    panel.select(str(broken / "symlink-final"))  # this one opens (all but its final image can be shown)
    assert opened == [str(broken / "symlink-final")] and "outside its folder" in said[-1]


@pytest.mark.parametrize("name", list(BROKEN))
def test_picking_a_broken_run_is_one_line_never_a_dialog(name: str, picking, qtbot) -> None:  # noqa: ANN001
    win, broken = picking
    qtbot.waitExposed(win)
    state, bar = win.state, win.statusBar()
    state.opener.open_run(broken / "good")
    settle(qtbot, win)
    assert not win.step_images.message.isVisible()
    where, text = SAID[name]
    win.history_panel.select(str(broken / name))
    settle(qtbot, win)
    assert no_dialog(win)
    assert all(m in state.reporter.notes for m in state.reporter.messages)  # every line said without a dialog
    if where == "status":
        line = bar.currentMessage()
        assert text in line and "\n" not in line
        assert Path(state.timeline.run_dir).name == "good"  # the run shown stays
    elif text == messages.FINAL_NONE:
        assert win.step_images.panes["final image"].title.text == messages.FINAL_NONE
    else:
        label = win.step_images.message
        assert label.isVisible() and text in label.text() and "\n" not in label.text()
    if name == "garbage-step":
        assert win.step_images.shown.error and win.step_images.panes["latents"].image is None
        state.timeline.set_step(0)  # a readable step: the line goes
        settle(qtbot, win)
        assert not win.step_images.message.isVisible() and win.step_images.panes["latents"].image is not None


@pytest.mark.parametrize("name", ["truncated-db", "missing-db"])
def test_dropping_a_broken_run_is_one_line_in_the_status_bar(name: str, win, qtbot, broken: Path) -> None:  # noqa: ANN001
    from tests.gui.live.test_gui_bundle import _drop

    _drop(win, broken / name)
    line = win.statusBar().currentMessage()
    assert no_dialog(win)
    assert line.startswith("Could not open the run") and BROKEN[name][1] in line and "\n" not in line
    assert win.state.reporter.notes == [line] and win.state.timeline.record is None

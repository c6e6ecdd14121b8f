"""The sweep gallery on a real small sweep study (made by the CLI, `ghostviewer.cli.main`), its
coordinator against a stand-in engine, and the dock in the window."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtTest import QTest

from ghostviewer.gui.coordinators.sweep_coordinator import SweepCoordinator
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter
from ghostviewer.gui.models.sweep_model import ANOMALY, FAILED, RUN_DIR, VERDICT, SweepModel
from ghostviewer.gui.widgets.sweep_gallery import SweepGallery
from ghostviewer.record import StudyRecord

PROMPTS = ["a red circle on a blue background", "a green square on a white background"]


@pytest.fixture(scope="module")
def sweep_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 prompts × seeds 6-7 with nan-latents (seed 7 fails), steps 2, through `ghostviewer sweep`."""
    from ghostviewer.cli import main

    folder = tmp_path_factory.mktemp("sweep")
    listing = folder / "prompts.txt"
    listing.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    runs = folder / "runs"
    code = main(["sweep", str(listing), "--seeds", "6-7", "--steps", "2", "--fault", "nan-latents", "--runs-dir",
                 str(runs)])
    assert code == 1  # some runs failed
    (study,) = [p for p in runs.iterdir() if p.name.startswith("sweep-")]
    return study


@pytest.mark.slow
def test_gallery_shows_thumbnails_badges_rates_and_opens_a_run(qtbot, sweep_study: Path) -> None:  # noqa: ANN001
    model = SweepModel()
    gallery = SweepGallery(model)
    qtbot.addWidget(gallery)
    gallery.resize(900, 500)
    gallery.show()
    model.open_study(sweep_study)
    assert model.rowCount() == 4
    rows = [model.index(i) for i in range(4)]
    assert [model.data(i, FAILED) for i in rows] == [False, True, False, True]
    assert [model.data(i, VERDICT) for i in rows] == ["ok", "nan", "ok", "nan"]
    assert "pipeline.prepare_latents" in model.data(rows[1], ANOMALY) and model.data(rows[0], ANOMALY) == ""
    qtbot.waitUntil(lambda: all(model.data(i, Qt.ItemDataRole.DecorationRole) is not None for i in rows))  # decoded
    assert all(not model.data(i, Qt.ItemDataRole.DecorationRole).isNull() for i in rows)  # final images
    assert not gallery.view.grab().isNull()  # the delegate paints thumbnails and badges
    assert gallery.rates.table.rowCount() == 2 and gallery.rates.table.item(0, 2).text() == "50 %"
    gallery.rates.by.setCurrentIndex(1)
    assert [gallery.rates.table.item(r, 0).text() for r in range(2)] == ["seed 6", "seed 7"]
    assert list(gallery.rates.bars.opts["height"]) == [0.01, 1.0]  # a sliver for 0 %, so the bar shows
    assert gallery.progress.value() == gallery.progress.maximum() == 4
    # the grid (the default view): a row per prompt, a column per seed; seed 7 fails both prompts
    grid = gallery.grid_model
    assert gallery.views.currentWidget() is gallery.grid and not gallery.sort.isVisibleTo(gallery)
    assert (grid.rowCount(), grid.columnCount()) == (2, 2) and grid.seeds == [6, 7]
    assert [grid.data(grid.index(r, 1), FAILED) for r in range(2)] == [True, True]
    assert [grid.data(grid.index(r, 0), FAILED) for r in range(2)] == [False, False]
    horizontal, vertical = Qt.Orientation.Horizontal, Qt.Orientation.Vertical
    assert grid.headerData(0, vertical) == "1  50 %" and grid.headerData(1, horizontal) == "7"
    assert grid.headerData(1, horizontal, Qt.ItemDataRole.ForegroundRole) is not None  # a failing seed: red
    assert grid.headerData(0, horizontal, Qt.ItemDataRole.ForegroundRole) is None
    assert 36 <= gallery.grid.cell_size() <= 96 and 2 * gallery.grid.cell_size() <= gallery.grid.viewport().width()
    cell = gallery.grid.visualRect(grid.index(0, 1)).center()
    with qtbot.waitSignal(gallery.runActivated, timeout=3000) as signal:
        QTest.mouseClick(gallery.grid.viewport(), Qt.MouseButton.LeftButton, pos=cell)
    assert signal.args == [grid.data(grid.index(0, 1), RUN_DIR)]
    assert not gallery.grid.grab().isNull()
    # the list: click a thumbnail, its run folder goes out
    gallery.set_view("list")
    assert gallery.views.currentWidget() is gallery.view and gallery.sort.isVisibleTo(gallery)
    second = gallery.view.visualRect(rows[1]).center()
    with qtbot.waitSignal(gallery.runActivated, timeout=3000) as signal:
        QTest.mouseClick(gallery.view.viewport(), Qt.MouseButton.LeftButton, pos=second)
    assert signal.args == [model.data(rows[1], RUN_DIR)] and Path(signal.args[0]).parent.parent == sweep_study
    # its menu: replay, bisect, and compare with the healthy seed of the same prompt, one click each
    failing, healthy = model.data(rows[1], RUN_DIR), model.data(rows[0], RUN_DIR)
    actions = dict(gallery.menu_actions(failing))
    assert model.healthy_twin(failing) == healthy and model.healthy_twin(healthy) is None
    with qtbot.waitSignal(gallery.compareRequested, timeout=1000) as compared:
        actions["Compare with a healthy seed"]()
    assert compared.args == [failing, healthy]
    with qtbot.waitSignal(gallery.replayRequested, timeout=1000) as replayed:
        actions["Replay this seed"]()
    assert replayed.args == [failing]
    assert dict(gallery.menu_actions(healthy))["Compare with a healthy seed"] is None


@pytest.mark.slow
def test_gallery_filters_and_sorts(qtbot, sweep_study: Path) -> None:  # noqa: ANN001
    model = SweepModel()
    gallery = SweepGallery(model)
    qtbot.addWidget(gallery)
    model.open_study(sweep_study)
    gallery.verdict.setCurrentIndex(gallery.verdict.findData("failed"))
    gallery._on_filter()
    assert [(e.prompt, e.seed) for e in model.shown()] == [(p, 7) for p in PROMPTS]
    assert gallery.grid_model.seeds == [7] and gallery.grid_model.rowCount() == 2  # the grid follows the filter
    gallery.filter_to("prompt", PROMPTS[1])
    assert [(e.prompt, e.seed) for e in model.shown()] == [(PROMPTS[1], 7)]
    model.set_filter(verdict="", prompt="", seed="6")
    assert {e.seed for e in model.shown()} == {6} and len(model.shown()) == 2
    model.set_filter(seed="")
    model.set_sort("verdict")
    assert [e.failed for e in model.shown()] == [True, True, False, False]
    model.set_sort("first anomaly")
    assert model.shown()[0].first_anomaly is not None


class StubEngine(QObject):
    sigEngineDied = Signal(str)
    sigEvent = Signal(dict)

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, dict]] = []

    def send(self, cmd: str, **fields) -> int:  # noqa: ANN003
        self.sent.append((cmd, fields))
        return len(self.sent)


class StubController(QObject):
    sigEngineState = Signal(str)
    engine_state = "running"


class StubPipeline:
    def key(self) -> tuple[str, str, str]:
        return ("demo", "auto", "")


class StubPrompt:
    negative, steps, guidance, scheduler, fault = "", 4, 7.5, "", "nan-latents"


class StubBlocks:
    def run_fields(self) -> dict:
        return {"bypass": ["unet.mid_block"]}


class StubHistory:
    runs_dir = Path("/tmp/runs")
    refreshed = 0

    def refresh(self) -> None:
        self.refreshed += 1


def test_coordinator_waits_for_the_engine_sends_one_sweep_and_follows_it(qtbot, sweep_study: Path,
                                                                         tmp_path: Path) -> None:  # noqa: ANN001
    engine, controller, model = StubEngine(), StubController(), SweepModel()
    reporter = ErrorReporter(dialogs=False)
    sweeps = SweepCoordinator(engine, controller, StubPrompt(), StubPipeline(), StubBlocks(), StubHistory(),
                              reporter, model)
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt,seed\nok,1\nbroken,x\n", encoding="utf-8")
    assert not sweeps.start(bad) and "bad.csv line 3" in reporter.messages[-1]
    assert not sweeps.start(sweep_study.parent.parent / "prompts.txt", seeds="3-1")
    good = sweep_study.parent.parent / "prompts.txt"
    assert sweeps.start(good, seeds="0-9") and sweeps.state == "waiting" and engine.sent == []  # a run is going
    assert not sweeps.start(good) and "already" in reporter.messages[-1]
    controller.engine_state = "ready"
    controller.sigEngineState.emit("ready")
    ((cmd, fields),) = engine.sent
    assert cmd == "sweep" and fields["seeds"] == "0-9" and fields["list"] == str(good.resolve())
    assert fields["settings"]["faults"] == ["nan-latents"] and fields["settings"]["bypass"] == ["unet.mid_block"]
    assert sweeps.state == "running" and "ray" not in fields
    engine.sigEvent.emit({"event": "sweep_started", "id": 2, "study_dir": str(sweep_study)})  # another command's id
    assert model.study_dir is None
    engine.sigEvent.emit({"event": "sweep_started", "id": 1, "study_dir": str(sweep_study)})
    assert model.rowCount() == 4
    with qtbot.waitSignal(sweeps.progressed, timeout=2000):
        engine.sigEvent.emit({"event": "sweep_progress", "id": 1, "done": 1, "total": 20, "rate": 2.0, "eta": 9.5})
    assert sweeps.show_study(sweep_study)  # the running sweep's own study: shown already
    assert not sweeps.show_study(tmp_path) and model.study_dir == str(sweep_study)  # the gallery follows the run
    sweeps.cancel()
    assert engine.sent[-1] == ("cancel", {"run": 1})
    with qtbot.waitSignal(sweeps.ended, timeout=2000) as ended:
        engine.sigEvent.emit({"event": "sweep_finished", "id": 1, "status": "cancelled", "summary": "50 %"})
    assert ended.args == ["cancelled"] and sweeps.state == "idle"
    assert StudyRecord(sweep_study).kind == "sweep"
    assert not sweeps.show_study(tmp_path) and "Could not show the sweep" in reporter.messages[-1]
    model.clear()
    assert sweeps.show_study(sweep_study) and model.rowCount() == 4


def test_window_has_the_gallery_dock_and_dropped_lists_become_sweeps(qtbot, window, tmp_path: Path,  # noqa: ANN001
                                                                     sweep_study: Path) -> None:
    titles = [dock.windowTitle() for dock in window.docks]
    assert "Sweep gallery" in titles
    gallery = window.docks[titles.index("Sweep gallery")].widget()
    assert isinstance(gallery, SweepGallery) and window.state.opener.sweeps is gallery.coordinator
    listing = tmp_path / "prompts.txt"
    listing.write_text("a red circle\n", encoding="utf-8")
    gallery.seeds.setText("0-4")
    window.state.opener.open_path(str(listing))
    assert gallery.coordinator.state == "waiting"  # the engine is not started in this test
    gallery.coordinator.cancel()
    assert gallery.coordinator.state == "idle"
    run_dir = str(StudyRecord(sweep_study).runs()[1].run_dir)
    gallery.runActivated.emit(run_dir)  # a clicked thumbnail opens its run in the timeline
    assert Path(window.state.timeline.run_dir) == Path(run_dir)
    # a sweep study picked in the history opens in the gallery
    studies = window.state.controller.studies
    with qtbot.waitSignal(studies.viewOpened, timeout=2000) as opened:
        assert studies.open_study(str(sweep_study)) == "sweep"
    assert opened.args == ["sweep"] and Path(gallery.model.study_dir) == sweep_study.resolve()
    assert gallery.model.rowCount() == 4


@pytest.mark.slow
def test_the_grid_row_headers_are_never_cut(qtbot, sweep_study: Path) -> None:  # noqa: ANN001
    """The prompt rows' headers ("2  50 %", bold where the prompt fails) as wide as their texts at 1366×768's size."""
    from PySide6.QtGui import QFont, QFontMetrics

    model = SweepModel()
    gallery = SweepGallery(model)
    qtbot.addWidget(gallery)
    gallery.resize(640, 300)
    gallery.show()
    model.open_study(sweep_study)
    grid = gallery.grid
    header = grid.verticalHeader()
    font = QFont(header.font())
    font.setBold(True)
    for row in range(grid.model().rowCount()):
        text = str(grid.model().headerData(row, Qt.Orientation.Vertical))
        assert header.width() >= QFontMetrics(font).horizontalAdvance(text) + 8, (text, header.width())


def test_bad_seeds_are_refused_before_the_file_picker(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    from PySide6.QtWidgets import QFileDialog

    asked: list[object] = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: asked.append(a) or ("", ""))
    gallery = SweepGallery(SweepModel())
    qtbot.addWidget(gallery)
    gallery.seeds.setText("abc")
    assert not gallery.open_button.isEnabled() and gallery.seeds.toolTip() == gallery.seeds_problem() != ""
    gallery._choose_list()  # Ctrl-clicked or triggered anyway: no picker for a sweep that cannot run
    assert asked == []
    gallery.seeds.setText("0-9")
    assert gallery.open_button.isEnabled()
    gallery.open_button.click()
    assert len(asked) == 1

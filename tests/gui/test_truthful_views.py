"""Views that tell the truth, on REAL demo runs (made once, tests/gui/demo_runs.py):
the heat map has enc | steps | dec columns and shows a VAE fault in the decode column; the badge and header
agree; Ctrl+J selects the right module in every view for decode and pipeline-step anomalies and never says
"step None"; a decoded NaN step is magenta; run-event search matches word prefixes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.analysis.stat_grid import stat_grid
from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.record import RunRecord
from ghostviewer.record.writer import annex_image
from tests.gui.demo_runs import demo_blocks, demo_run
from tests.gui.handover import close_window
from tests.gui.live_window import needs_demo

pytestmark = needs_demo
VAE_CULPRIT = "vae.decoder.up_blocks.1.resnets.0"


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    runs = tmp_path_factory.mktemp("truth-runs")
    return {"vae": str(demo_run(tmp_path_factory, runs, "a red circle", faults=["fp16-vae-overflow"], steps=3)),
            "nan": str(demo_run(tmp_path_factory, runs, "a red circle", faults=["nan-latents"], seed=7, steps=3)),
            "blocks": demo_blocks()}


@pytest.fixture(scope="module")
def _module_window(qapp, real_runs: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001
    from ghostviewer.gui.app import create_window

    window = create_window(AppSettings(tmp_path_factory.mktemp("truthful") / "settings.ini"), dialogs=False)
    window.state.history.set_runs_dir(Path(real_runs["vae"]).parent)
    window.state.blocks.set_blocks(real_runs["blocks"])
    window.resize(1366, 768)
    window.show()
    yield window
    close_window(window)


@pytest.fixture
def win(_module_window, qtbot):  # noqa: ANN001, ANN201
    """One window for the module, each test's with no run shown (it opens its own, read afresh)."""
    window = _module_window
    qtbot.waitExposed(window)
    window.state.timeline.close_run()
    qtbot.waitUntil(lambda: window.state.timeline.record is None and window.state.step_data.idle
                    and not window.heatmap.loading)
    window.statusBar().clearMessage()
    return window


@pytest.mark.slow
def test_the_heat_map_shows_a_vae_fault_in_the_decode_column(win, real_runs: dict, qtbot) -> None:  # noqa: ANN001
    record = RunRecord(real_runs["vae"])
    assert record.settings.get("dtype") in (None, "float32") and (record.verdict or {}).get("label") == "ok"
    assert (record.first_anomaly or {}).get("phase") == "decode"
    win.state.opener.open_run(real_runs["vae"])
    qtbot.waitUntil(lambda: not win.heatmap.loading, timeout=5000)
    grid = win.heatmap.grid
    assert grid is not None and grid.columns == [("encode", None), ("denoise", 0), ("denoise", 1),
                                                 ("denoise", 2), ("decode", None)]
    assert [grid.label(j) for j in range(5)] == ["enc", "0", "1", "2", "dec"]
    assert any(m.startswith("text_encoder.") for m in grid.modules) and VAE_CULPRIT in grid.modules
    assert grid.modules.index("text_encoder.embeddings") < grid.modules.index("unet.conv_in") < grid.modules.index(
        VAE_CULPRIT)  # rows in execution order: encode, denoise, decode
    cell = win.heatmap.anomaly_cell()
    assert cell == (grid.modules.index(VAE_CULPRIT), 4)  # in the decode column
    assert win.heatmap.anomaly.isVisible() and win.heatmap.anomaly.rect().center().x() == 4
    assert grid.rows[cell].fp16_headroom > 1  # it overflows float16 there
    assert len(win.heatmap.phase_lines) == 2


def test_badge_and_header_agree_and_the_jump_selects_everywhere(win, real_runs: dict, qtbot) -> None:  # noqa: ANN001
    state = win.state
    state.opener.open_run(real_runs["vae"])
    qtbot.waitUntil(lambda: not win.heatmap.loading, timeout=5000)
    assert win.timeline_bar.badge.text() == "ok · overflow" and win.timeline_bar.badge.kind == "warn"
    assert f"first anomaly: overflow in {VAE_CULPRIT} (decode)" in win.run_header.text()
    win.actions.jump_anomaly.trigger()
    message = win.statusBar().currentMessage()
    assert "None" not in message and message.endswith(f"overflow in {VAE_CULPRIT} (decode).")
    assert state.blocks.selected == VAE_CULPRIT
    assert win.block_tree.tree.currentItem() is win.block_tree.items[VAE_CULPRIT]
    assert win.heatmap.cursor.isVisible() and win.heatmap.cursor.rect().center().x() == 4
    state.opener.open_run(real_runs["nan"])  # nan-latents: born in pipeline.prepare_latents, not in a block
    qtbot.waitUntil(lambda: not win.heatmap.loading, timeout=5000)
    assert win.timeline_bar.badge.text() == "nan"
    state.timeline.set_step(2)
    win.actions.jump_anomaly.trigger()
    assert state.timeline.step == 0 and state.blocks.selected == "pipeline.prepare_latents"
    assert win.block_tree.tree.currentItem() is None  # not left on the previous run's culprit
    grid = win.heatmap.grid
    assert win.heatmap.cursor.rect().center().x() == grid.step_column(0)
    assert "pipeline.prepare_latents" in state.selection.modules  # the plot draws it
    assert "denoise step 0" in win.statusBar().currentMessage()
    assert "step 0 of 0–2" in win.timeline_bar.step_label.full_text


@pytest.mark.slow
def test_a_decoded_nan_step_is_magenta(win, real_runs: dict, qtbot) -> None:  # noqa: ANN001
    run = real_runs["nan"]
    annex_image(run, "step_0001_decoded", np.full((64, 64, 3), np.nan, np.float32), step=1)  # as the engine does
    state = win.state
    state.opener.open_run(run)
    state.timeline.set_step(1)
    qtbot.waitUntil(lambda: state.step_data.idle and win.step_images.shown.step == 1, timeout=5000)
    image = win.step_images.items["VAE decode"].image
    assert image is not None and (image.reshape(-1, 3) == (255, 0, 255)).all()
    assert "NaN" in win.step_images.panes["VAE decode"].full_title and "step 1" in win.step_images.panes[
        "VAE decode"].title.text


def test_run_event_search_matches_word_prefixes(win, real_runs: dict, qtbot) -> None:  # noqa: ANN001
    win.state.opener.open_run(real_runs["nan"])
    view = win.run_events

    def events(query: str) -> list:
        view.search.setText(query)
        qtbot.waitUntil(lambda: not view.loading, timeout=5000)  # read off the GUI thread
        return view.events

    found = events("dra ini")  # "… draws NaN initial latents"
    assert len(found) == 1 and "initial" in found[0].message
    assert len(events('"initial latents"')) == 1  # FTS syntax of one's own is kept
    assert events("zzz") == []


def test_history_rows_of_real_runs(win, real_runs: dict) -> None:  # noqa: ANN001
    win.state.history.refresh()
    rows = {win.history_panel.tree.topLevelItem(i).text(4): win.history_panel.tree.topLevelItem(i)
            for i in range(win.history_panel.tree.topLevelItemCount())}
    vae = rows["[ghost: fp16-vae-overflow] a red circle"]
    assert vae.text(1) == "ok · overflow" and vae.text(5) == f"overflow in {VAE_CULPRIT} (decode)"
    assert not vae.icon(0).isNull()
    assert rows["[ghost: nan-latents] a red circle"].text(1) == "nan"


def test_stat_grid_prefers_a_bad_call() -> None:
    from ghostviewer.record import StatRow

    def row(call: int, nan: int) -> StatRow:
        return StatRow("encode", None, "text_encoder.embeddings", call, call, (1, 4), "float32", 0.0, 1.0, 0.5,
                       0.1, 1.0, nan, 0)

    grid = stat_grid([row(0, 0), row(1, 3)])  # the unconditional pass is fine, the prompt's is NaN
    assert grid.columns == [("encode", None)] and grid.bad.tolist() == [[True]] and grid.rows[(0, 0)].call == 1
    assert grid.cell("text_encoder.embeddings", None, "encode") == (0, 0) and grid.steps == []

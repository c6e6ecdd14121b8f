"""The window while a real-size run is written: a record shaped like a 512 px SD 1.5-architecture run at block
depth (15 text-encoder modules called twice, 63 U-Net rows a step, 20 steps, 512 px previews) is written step by
step, as the engine does, into a window following it live (no engine). Every step shows in the heat map as a new
column and in the step images, and the GUI thread's work per step stays bounded: no statistics row and no step file
read on it, one full heat-map redraw (the first), each cell valued once — not a timed test, the work is counted."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.analysis.stat_grid import display_values, grid_rgba, grid_values, stat_grid
from ghostviewer.gui.models import stat_grid_model
from ghostviewer.record import RunRecord, RunWriter, StatRow, StepInfo
from tests.gui.handover import module_window

STEPS = 20
TEXT = ["text_encoder.embeddings", *(f"text_encoder.encoder.layers.{i}" for i in range(12)), "text_encoder.encoder",
        "text_encoder.final_layer_norm"]


def unet_modules() -> list[str]:
    """The 63 outputs a step of SD 1.5's U-Net records at block depth, in execution order (as a recorded run has)."""
    names = ["pipeline.prepare_latents", "unet.time_proj", "unet.time_embedding", "unet.conv_in"]
    for b in range(4):
        for k in range(2):
            names += [f"unet.down_blocks.{b}.resnets.{k}"] + ([f"unet.down_blocks.{b}.attentions.{k}"] if b < 3 else [])
        names += ([f"unet.down_blocks.{b}.downsamplers.0"] if b < 3 else []) + [f"unet.down_blocks.{b}"]
    names += ["unet.mid_block.resnets.0", "unet.mid_block.attentions.0.transformer_blocks.0",
              "unet.mid_block.attentions.0", "unet.mid_block.resnets.1", "unet.mid_block"]
    for b in range(4):
        for k in range(3):
            names += [f"unet.up_blocks.{b}.resnets.{k}"] + ([f"unet.up_blocks.{b}.attentions.{k}"] if b > 0 else [])
        names += ([f"unet.up_blocks.{b}.upsamplers.0"] if b < 3 else []) + [f"unet.up_blocks.{b}"]
    return names + ["unet.conv_norm_out", "unet.conv_act", "unet.conv_out", "pipeline.noise_pred", "scheduler.step"]


UNET = unet_modules()
DECODE = ["vae.post_quant_conv", "vae.decoder.conv_in", "vae.decoder.mid_block", "vae.decoder.conv_out"]


def row(phase: str, step: int | None, module: str, seq: int, value: float, call: int = 0) -> StatRow:
    return StatRow(phase, step, module, call, seq, (2, 320, 64, 64), "float32", -value, value, 0.0, value / 3, value,
                   0, 0)


def step_tensors(step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    latents = rng.standard_normal((4, 64, 64)).astype(np.float32) * (1.0 - step / STEPS)
    preview = np.zeros((512, 512, 3), np.uint8)
    preview[..., 0] = 10 * step  # the step's own red, so the shown preview names its step
    preview[: 16 * step + 8, :, 2] = 200
    return {"latents": latents, "x0": latents * 0.5, "preview": preview,
            "latents_preview": np.full((64, 64, 3), step, np.uint8)}


@pytest.fixture(scope="module")
def shared_window(tmp_path_factory) -> Iterator:  # noqa: ANN001 - pytest's factory
    yield from module_window(tmp_path_factory, "live-real-size")


@pytest.fixture
def win(shared_window, qtbot, tmp_path: Path):  # noqa: ANN001, ANN201 - the main window, qtbot
    shared_window.resize(1400, 900)
    shared_window.show()
    qtbot.waitExposed(shared_window)
    for dock in shared_window.docks:
        if dock.windowTitle() == "Heat map":
            dock.raise_()
    shared_window.state.timeline.close_run()
    return shared_window


def test_a_real_size_run_shows_step_by_step_at_a_bounded_cost(win, qtbot, tmp_path: Path,  # noqa: ANN001
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stat_grid_model, "LIVE_READ_MS", 5)  # the test's steps come faster than an engine's
    on_gui: Counter[str] = Counter()
    gui_thread = threading.main_thread()
    for name in ("stats", "step_tensors"):
        original = getattr(RunRecord, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            result = _original(self, *args, **kwargs)
            if threading.current_thread() is gui_thread:
                on_gui[_name] += len(result)
            return result
        monkeypatch.setattr(RunRecord, name, counted)

    state, heatmap, images = win.state, win.heatmap, win.step_images
    heatmap.stat.setCurrentText("absmax")
    writer = RunWriter.create(tmp_path / "runs", {"prompt": "a red circle", "seed": 1, "steps": STEPS,
                                                  "guidance": 7.5, "source": "sd15", "width": 512, "height": 512},
                              {"device": "cpu"})
    seq = 0
    rows: list[StatRow] = []
    for call in (0, 1):  # the prompt and the unconditional pass
        for i, module in enumerate(TEXT):
            rows.append(row("encode", None, module, seq, 1.0 + i + call, call))
            seq += 1
    writer.add_stats(rows)
    writer.commit()
    state.timeline.open_run(writer.path, live=True)  # the engine's 'started'
    full_before, cells_before = heatmap.draws["full"], heatmap.draws["cells"]
    reads_before = dict(heatmap.data.reads)
    for step in range(STEPS):
        step_rows = [row("denoise", step, module, seq + i, (i + 1) * (step + 1.0)) for i, module in enumerate(UNET)]
        seq += len(UNET)
        rows += step_rows
        writer.add_stats(step_rows)
        writer.add_step(StepInfo(step, 999.0 - 50 * step, None, 30.0, None, None, None, "rss"), step_tensors(step))
        state.timeline.request_refresh()  # the engine's 'step' (run_coordinator._on_stepped)
        qtbot.waitUntil(lambda s=step: heatmap.grid is not None and heatmap.grid.steps[-1:] == [s]
                        and not heatmap.loading and state.step_data.idle and images.shown.step == s, timeout=10_000)
        # what is shown is this step's: its preview (512 px, recorded), its latents coloured by the reader
        assert np.array_equal(images.panes["predicted x₀"].image, step_tensors(step)["preview"])
        assert images.shown.latents_mosaic is not None
        assert np.array_equal(images.panes["latents"].image, images.shown.latents_mosaic[0])

    grid = heatmap.grid
    assert grid.modules == TEXT + UNET and len(grid.columns) == STEPS + 1  # enc | 20 steps
    # what is drawn is the grid of every row at once, coloured on the whole run's range
    expected, _levels = grid_rgba(display_values(grid_values(stat_grid(rows), "absmax"), "absmax", True),
                                  grid.bad, heatmap.lut)
    assert np.array_equal(heatmap.image.image, expected)
    (x0, x1), (y0, y1) = heatmap.plot.getViewBox().viewRange()
    assert (x0, x1, y0, y1) == pytest.approx((-0.5, STEPS + 0.5, 0, len(TEXT) + len(UNET)))
    # the work: nothing read on the GUI thread; one full redraw, then columns only, each cell valued once
    assert on_gui == Counter()
    assert heatmap.draws["full"] - full_before == 1
    assert heatmap.draws["cells"] - cells_before == len(TEXT) + len(UNET) * STEPS  # not once per step each
    reads = {kind: n - reads_before[kind] for kind, n in heatmap.data.reads.items()}
    assert reads["whole"] == 0 and 1 <= reads["steps"] <= STEPS
    # the plot has every default module's curve (made a few a redraw), each through the last step
    plot = win.stat_plot
    qtbot.waitUntil(lambda: plot.idle and len(plot._curves) == len(plot.series.modules) > 0, timeout=10_000)
    for curve in plot._curves.values():
        assert list(curve.getData()[0]) == list(range(STEPS))

    # the run ends: read whole once, with its decode column
    writer.add_stats([row("decode", None, module, seq + i, 2.0) for i, module in enumerate(DECODE)])
    writer.set_verdict({"label": "ok", "scores": {}}, None)
    writer.finish("done", 600.0)
    state.timeline.set_live(False)
    qtbot.waitUntil(lambda: heatmap.grid is not None and heatmap.grid.columns[-1] == ("decode", None)
                    and not heatmap.loading, timeout=10_000)
    assert heatmap.data.reads["whole"] - reads_before["whole"] == 1
    assert heatmap.image.image.shape[:2] == (len(TEXT) + len(UNET) + len(DECODE), STEPS + 2)


def test_a_grid_grown_step_by_step_is_the_grid_of_all_rows() -> None:
    """extend_grid, fed a run's steps one at a time (a module first seen at step 2, NaN in a later call), gives
    stat_grid's grid of every row at once: modules, columns, cells and bad cells."""
    rows = [row("encode", None, m, i, 1.0 + i) for i, m in enumerate(TEXT[:3])]
    grid = stat_grid_model.extend_grid(None, rows)
    seq = len(rows)
    for step in range(4):
        modules = UNET[:5] + (["unet.late_block"] if step >= 2 else [])
        new = [row("denoise", step, m, seq + i, (i + 1) * (step + 1.0)) for i, m in enumerate(modules)]
        if step == 3:
            new.append(StatRow("denoise", step, UNET[1], 1, seq + 9, (1,), "float32", 0, 0, 0, 0, 0, 1, 0))
        seq += 10
        rows += new
        grid = stat_grid_model.extend_grid(grid, new)
    whole = stat_grid(rows)
    assert grid is not None and grid.modules == whole.modules and grid.columns == whole.columns
    assert grid.rows == whole.rows and np.array_equal(grid.bad, whole.bad) and grid.bad.sum() == 1

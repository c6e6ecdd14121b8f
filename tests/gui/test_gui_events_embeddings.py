"""The run's event log (search, level filter, malformed FTS queries), the prompt embeddings view, the run-end
summary lines for the app log, and the status bar forgetting a previous run's first anomaly (synthetic runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ghostviewer.analysis.summary import run_end_lines
from ghostviewer.gui import messages
from tests.gui.fake_runs import write_fake_run

EVENTS = [
    ("load", "info", "loaded the demo pipeline on cpu"),
    ("fault", "warning", "ghost fault armed in unet.mid_block at step 3"),
    ("nan", "error", "NaN in unet.mid_block output at step 3"),
    ("verdict", "info", "verdict computed: nan"),
]


def messages_shown(view, qtbot) -> list[str]:  # noqa: ANN001
    """The table's messages once the newest query's events are in (they are read off the GUI thread)."""
    qtbot.waitUntil(lambda: not view.loading, timeout=5000)
    return [view.table.item(r, 3).text() for r in range(view.table.rowCount())]


def test_run_events_search_and_level_filter(window, gui_env: Path, qtbot) -> None:  # noqa: ANN001
    view = window.run_events
    window.state.timeline.open_run(write_fake_run(gui_env, events=EVENTS))
    assert view.loading  # read on a worker, not on the GUI thread
    assert messages_shown(view, qtbot) == [m for _k, _l, m in EVENTS]
    assert [view.table.item(r, 1).text() for r in range(4)] == ["info", "warning", "error", "info"]
    view.search.setText("verdict")
    assert messages_shown(view, qtbot) == ["verdict computed: nan"]
    view.search.setText("")
    view.level.setCurrentText("warning")
    assert messages_shown(view, qtbot) == ["ghost fault armed in unet.mid_block at step 3"]
    view.level.setCurrentText("all")
    for query in ("unet.mid_block", '"unbalanced', "mid_block AND (", "*"):  # not valid FTS5: a substring
        view.search.setText(query)
    view.search.setText("unet.mid_block")  # typed over the queries before: only the newest answer is shown
    assert len(messages_shown(view, qtbot)) == 2
    view.level.setCurrentText("error")
    assert messages_shown(view, qtbot) == ["NaN in unet.mid_block output at step 3"]
    window.state.timeline.close_run()
    assert view.table.rowCount() == 0


def test_embeddings_view_points_labels_and_source(window, gui_env: Path, qtbot) -> None:  # noqa: ANN001
    view = window.embeddings
    assert view.points is None and view.message.text() == "No run shown."
    window.state.timeline.open_run(write_fake_run(gui_env, prompt_dim=16))
    assert view.loading  # read and projected on a worker
    qtbot.waitUntil(lambda: not view.loading, timeout=10_000)
    tokens = ["<|startoftext|>", "a", "red", "circle", "on", "a", "blue", "background", "#7", "<|endoftext|>"]
    assert view.points is not None and view.points.shape == (len(tokens), 2)
    assert len(view.labels) == len(tokens) and view.labels[2].toPlainText() == "red"
    assert view.labels[0].toPlainText() == "⟨start⟩" and view.used.text() == "PCA"
    assert len(view.scatter.points()) == len(tokens)
    before = view.points.copy()
    view.source.setCurrentText("final hidden states")
    qtbot.waitUntil(lambda: not view.loading, timeout=10_000)
    assert view.points.shape == before.shape and not np.allclose(view.points, before)
    assert len(view.labels) == len(tokens)
    window.state.timeline.open_run(write_fake_run(gui_env, seed=8))  # no prompt tensors
    qtbot.waitUntil(lambda: not view.loading, timeout=10_000)
    assert view.points is None and not view.labels and "No prompt embeddings" in view.message.text()


def test_run_end_lines_and_stale_anomaly_message(window, gui_env: Path) -> None:  # noqa: ANN001
    bad = write_fake_run(gui_env, steps=6, nan_at=3)
    verdict, anomaly = run_end_lines(str(bad))
    assert verdict.startswith("verdict: nan") and "std=0.3" in verdict
    assert anomaly.startswith("first anomaly: nan in unet.mid_block (denoise step 3): tensor[1,4,16,16] float32")
    assert anomaly.endswith("NaN!")
    assert run_end_lines(str(write_fake_run(gui_env, seed=9)))[1] == "first anomaly: none"
    assert run_end_lines(str(gui_env / "nowhere")) == []
    state, bar = window.state, window.statusBar()
    state.timeline.open_run(bad)
    window.actions.jump_anomaly.trigger()
    assert bar.currentMessage().startswith(messages.ANOMALY_PREFIX)
    state.timeline.open_run(write_fake_run(gui_env, seed=10))
    assert bar.currentMessage() == ""
    bar.showMessage("something else")
    state.timeline.open_run(bad)
    assert bar.currentMessage() == "something else"

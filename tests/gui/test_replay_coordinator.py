"""The replay coordinator: N replays of a run queued as N jobs, checked against the original with
analysis.compare when the last one ends — "reproduced k/N" and the first divergence. Stand-in engine (its runs
are deterministic by seed, so an original written with a NaN diverges and a fresh one reproduces)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ghostviewer.gui import messages
from ghostviewer.gui.coordinators.replay_coordinator import check_replays, describe_replays
from tests.gui.fake_runs import write_fake_run
from tests.gui.handover import hand_over, open_fake_window

WAIT_MS = 30_000
SETTINGS = {"prompt": "a red circle", "seed": 3, "steps": 5, "guidance": 7.5, "source": "demo", "device": "cpu"}


@pytest.fixture(scope="module")
def _module_window(qapp, request: pytest.FixtureRequest,  # noqa: ANN001 - pytest-qt's
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from pytestqt.qtbot import QtBot

    yield from open_fake_window(QtBot(request), tmp_path_factory, "replay-coordinator-window")


@pytest.fixture
def fake_window(_module_window, qtbot, gui_env: Path):  # noqa: ANN001, ANN201
    """One window and stand-in engine for the module, handed to each test as new (on the test's runs folder)."""
    hand_over(_module_window, qtbot, gui_env)
    return _module_window


def test_check_replays_counts_and_finds_the_first_divergence(gui_env: Path) -> None:
    original = write_fake_run(gui_env, seed=3, run_id="orig", settings=SETTINGS)
    same = write_fake_run(gui_env, seed=3, run_id="same", settings=SETTINGS)
    ghost = write_fake_run(gui_env, seed=3, run_id="ghost", nan_at=2, settings=SETTINGS)
    result = check_replays(str(original), 3, [str(same), str(ghost), None])
    assert (result["times"], result["checked"], result["reproduced_count"]) == (3, 2, 1)
    assert result["reproduced"] is False and result["replay"] == str(ghost)
    assert result["first_divergence"]["step"] == 2
    assert describe_replays(result).startswith("Replays of seed 3: reproduced 1/3 (1 did not finish) — first")
    unfinished = check_replays(str(original), 3, [str(same), None])
    assert unfinished["reproduced"] is None and unfinished["first_divergence"] is None
    assert check_replays(str(original), 3, [str(same)])["reproduced"] is True


def test_replay_twice_reproduces(fake_window, qtbot, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    state = fake_window.state
    state.prompt.update(steps=4, seed=5, seed_locked=True)
    original = state.controller.queue_run()
    qtbot.waitUntil(lambda: original.finished, timeout=WAIT_MS)
    sent: list[dict] = []
    send = state.engine.send
    monkeypatch.setattr(state.engine, "send", lambda cmd, **fields: sent.append({"cmd": cmd, **fields}) or
                        send(cmd, **fields))  # what goes down the pipe, still sent
    with qtbot.waitSignal(state.controller.sigReplayChecked, timeout=WAIT_MS) as checked:
        first = state.controller.replay(times=2)
    result = checked.args[0]
    assert first is not None and first.replay_of == original.run_dir
    runs = [c for c in sent if c["cmd"] == "run"]  # the engine re-runs the run itself (a watched call re-issued)
    assert len(runs) == 2 and all(c["replay_of"] == original.run_dir for c in runs)
    assert (result["times"], result["reproduced_count"], result["reproduced"]) == (2, 2, True)
    replays = [j for j in state.queue.jobs() if j.replay_of == original.run_dir]
    assert len(replays) == 2 and all(j.status == "done" for j in replays)
    assert sorted(result["replays"]) == sorted(j.run_dir for j in replays) and len(set(result["replays"])) == 2
    assert fake_window.statusBar().currentMessage() == "Replays of seed 5: reproduced 2/2."
    assert "reproduced" in fake_window.timeline_bar.replay_result.words


def test_replay_twice_catches_a_ghost(fake_window, qtbot, gui_env: Path) -> None:  # noqa: ANN001
    state = fake_window.state
    original = write_fake_run(gui_env, seed=3, run_id="ghostly", nan_at=2, settings=SETTINGS)
    with qtbot.waitSignal(state.controller.sigReplayChecked, timeout=WAIT_MS) as checked:
        state.controller.replay(str(original), times=2)
    result = checked.args[0]
    assert (result["reproduced"], result["reproduced_count"], result["checked"]) == (False, 0, 2)
    assert result["first_divergence"]["phase"] == "denoise" and result["first_divergence"]["step"] == 2
    assert "reproduced 0/2 — first difference:" in fake_window.statusBar().currentMessage()
    assert "NOT reproduced" in fake_window.timeline_bar.replay_result.words


def test_a_cancelled_replay_counts_as_unfinished(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    state.prompt.update(steps=3, seed=9, seed_locked=True)
    original = state.controller.queue_run()
    qtbot.waitUntil(lambda: original.finished, timeout=WAIT_MS)
    with qtbot.waitSignal(state.controller.sigReplayChecked, timeout=WAIT_MS) as checked:
        first = state.controller.replay(times=2)
        assert first is not None
        state.controller.cancel(first.id + 1)  # the second, still queued
    result = checked.args[0]
    assert (result["reproduced"], result["reproduced_count"], result["checked"]) == (None, 1, 1)
    assert result["statuses"] == ["done", "cancelled"]
    assert fake_window.statusBar().currentMessage() == "Replays of seed 9: reproduced 1/2 (1 did not finish)."


def test_replay_needs_a_run(window) -> None:  # noqa: ANN001
    assert window.state.controller.replay() is None
    assert window.state.reporter.last_message == messages.NO_RUN_SELECTED

"""Run ▸ Probe the pipeline: what the action sends, the engine's `probe` command itself on the real demo pipeline
(two probes at 2 steps), and what the window shows of its report — progress and the summary in the status bar, a
dialog with one row per probe (its result in green or red), a double-click opening the run that is its evidence."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from ghostviewer.gui.dialogs.probe_report import FAILED, PASSED, ProbeReport, summary_line
from tests.gui.live_window import needs_demo


def finished_study(events: list[dict[str, Any]]) -> str:
    return next(e for e in events if e["event"] == "probe_finished")["result"]["study_dir"]


def history_paths(window) -> list[str]:  # noqa: ANN001
    return [study.path for study in window.state.history.studies if study.kind == "probe"]


def _menu_texts(window) -> list[str]:  # noqa: ANN001
    run_menu = next(m for m in window.menuBar().actions() if m.text() == "&Run").menu()
    return [a.text() for a in run_menu.actions()]


@needs_demo
def test_probing_from_the_window_runs_the_battery_and_shows_its_report(window, demo_loaded, gui_env: Path,  # noqa: ANN001
                                                                        qtbot) -> None:
    from ghostviewer.engine.server import Emitter, EngineSession

    assert "&Probe the pipeline" in _menu_texts(window)
    sent: list[tuple[str, dict[str, Any]]] = []
    window.state.engine.send = lambda cmd, **fields: sent.append((cmd, fields)) or 21
    window.actions.probe.trigger()
    assert sent == [("probe", {"runs_dir": str(gui_env)})]
    coordinator = window.probes
    assert coordinator.busy and "Probing the loaded pipeline" in window.statusBar().currentMessage()
    window.actions.probe.trigger()  # one battery at a time
    assert len(sent) == 1

    out = io.StringIO()  # the engine's own command, in this process, on the demo
    session = EngineSession(Emitter(out))
    session.loaded = demo_loaded
    session.handle({"cmd": "probe", "id": 21, "runs_dir": str(gui_env), "steps": 2,
                    "probes": ["seed_effect", "determinism"]})
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {e["event"] for e in events} == {"probe_progress", "probe_finished"}
    said: list[str] = []
    coordinator.sigMessage.connect(said.append)
    for event in events:  # as the engine's pipe hands them to the window
        window.state.engine._dispatch(json.dumps(event).encode())
    assert "Probing: seed effect…" in said and "Probing: determinism…" in said
    report = window.probe_report
    qtbot.waitUntil(report.isVisible, timeout=3000)
    assert not coordinator.busy
    assert window.statusBar().currentMessage().startswith("Probes: all 2 passed")
    study = Path(finished_study(events))
    qtbot.waitUntil(lambda: any(Path(p).name == study.name for p in history_paths(window)), timeout=5000)
    (row,) = [s for s in window.state.history.studies if Path(s.path).name == study.name]
    assert row.result == "all 2 probes passed"  # the history row's words
    table = report.table
    assert table.rowCount() == 2
    assert [table.item(r, 0).text() for r in range(2)] == ["seed effect", "determinism"]
    assert all(table.item(r, 1).text() == "passed" and table.item(r, 1).foreground().color() == PASSED
               for r in range(2))
    (finished,) = [e for e in events if e["event"] == "probe_finished"]
    evidence = finished["result"]["findings"][0]["evidence"]["runs"]
    table.cellDoubleClicked.emit(0, 0)
    qtbot.waitUntil(lambda: window.state.timeline.run_dir is not None
                    and Path(window.state.timeline.run_dir) == Path(evidence[-1]), timeout=5000)


def test_a_failed_probe_reads_red_with_its_finding_and_bug_class(qtbot) -> None:  # noqa: ANN001
    report = {"findings": [
        {"probe": "prompt_effect", "ok": False, "finding": "prompt has no effect", "compared": "two prompts",
         "bug_class": "text conditioning lost", "evidence": {"runs": ["/r/a", "/r/b"]}},
        {"probe": "negative_effect", "ok": True, "finding": None, "compared": "", "bug_class": "x",
         "skipped": "guidance 1: no negative prompt to test", "evidence": {}}],
        "runs": 2, "elapsed_s": 1.0}
    opened: list[str] = []
    dialog = ProbeReport(open_run=opened.append)
    qtbot.addWidget(dialog)
    dialog.show_report(report)
    assert summary_line(report) == "Probes: 1 of 2 failed — prompt has no effect"
    assert dialog.summary.text() == summary_line(report)
    assert dialog.table.item(0, 1).text() == "prompt has no effect"
    assert dialog.table.item(0, 1).foreground().color() == FAILED
    assert dialog.table.item(0, 3).text() == "text conditioning lost"
    assert dialog.table.item(1, 1).text().startswith("skipped: guidance 1")
    assert dialog.table.columnWidth(2) >= 200  # what was compared reads in a line or two, not a word a line
    dialog.table.cellDoubleClicked.emit(0, 2)
    assert opened == ["/r/b"]  # the second of the pair: the one that shows the problem

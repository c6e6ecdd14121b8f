"""The history lists studies beside runs; a study expands to its child runs, which open like run rows."""

from __future__ import annotations

from pathlib import Path

from ghostviewer.gui.models.history_model import HistoryModel, StudyEntry
from ghostviewer.gui.widgets.history_panel import KIND_ROLE, PATH_ROLE, HistoryPanel
from ghostviewer.record import RunRecord, StudyWriter
from tests.gui.fake_runs import write_fake_run


def _replay_study(runs: Path) -> tuple[StudyWriter, list[Path]]:
    study = StudyWriter.create(runs, "replay", {"run": "original", "times": 2}, total=2, study_id="replay-study")
    children = []
    for i in range(2):
        child = write_fake_run(study.runs_dir, steps=3, seed=5, run_id=f"replay-{i}", nan_at=1 if i else None)
        study.add_run(child, {"replay": i}, role="replay", summary=RunRecord(child).summary())
        study.set_progress(i + 1)
        children.append(child)
    return study, children


def test_model_lists_study_beside_runs(tmp_path: Path) -> None:
    run = write_fake_run(tmp_path, steps=2, seed=1, run_id="a-run")
    study, children = _replay_study(tmp_path)
    model = HistoryModel(tmp_path)
    model.refresh()
    assert [e.path for e in model.entries] == [str(run)]  # the child runs do not flood the top level
    assert [type(r).__name__ for r in model.rows] == ["StudyEntry", "RunEntry"]  # newest first
    entry = model.study(str(study.path))
    assert isinstance(entry, StudyEntry) and entry.kind == "replay" and entry.progress == "2/2"
    assert entry.state(None) == "incomplete"  # still 'running' on disk with nothing live inside it
    assert entry.state(str(children[1])) == "running"
    assert [(c.path, c.role, c.label, c.state()) for c in entry.children] == [
        (str(children[0]), "replay", "replay 0", "ok"), (str(children[1]), "replay", "replay 1", "nan")]

    model.refresh()
    assert model.study(str(study.path)) is entry  # unchanged on disk: read from the cache
    study.finish("done", result={"reproduced": False, "summary": "reproduced 1/2"})
    model.refresh()
    entry = model.study(str(study.path))
    assert entry is not None and entry.state(None) == "done" and entry.result == "reproduced 1/2"


def test_activating_a_child_opens_that_run(qtbot, tmp_path: Path) -> None:  # noqa: ANN001 - pytest-qt
    write_fake_run(tmp_path, steps=2, seed=1, run_id="a-run")
    study, children = _replay_study(tmp_path)
    study.finish("done", result={"summary": "reproduced 1/2"})
    model = HistoryModel(tmp_path)
    panel = HistoryPanel(model)
    qtbot.addWidget(panel)
    model.refresh()
    top = panel.tree.topLevelItem(0)
    assert top.data(0, KIND_ROLE) == "study" and top.childCount() == 2
    assert (top.text(1), top.text(3), top.text(4)) == ("done", "2/2", "replay: reproduced 1/2")

    with qtbot.waitSignal(panel.studySelected, timeout=1000) as blocker:
        panel.tree.setCurrentItem(top)
    assert blocker.args == [str(study.path)] and top.isExpanded()

    with qtbot.waitSignal(panel.runSelected, timeout=1000) as blocker:
        panel.tree.setCurrentItem(top.child(1))
    assert blocker.args == [str(children[1])]
    assert top.child(1).data(0, PATH_ROLE) == str(children[1]) and top.child(1).text(1) == "nan"

    model.refresh()  # a rebuild keeps the study open and the child current
    top = panel.tree.topLevelItem(0)
    assert top.isExpanded() and panel.tree.currentItem().data(0, PATH_ROLE) == str(children[1])

    panel.filter.setText("replay 0")  # the filter reaches into a study's runs
    assert not top.isHidden() and not top.child(0).isHidden() and top.child(1).isHidden()
    assert panel.tree.topLevelItem(1).isHidden()
    panel.filter.clear()

    panel.tree.setCurrentItem(panel.tree.topLevelItem(1))
    with qtbot.waitSignal(panel.runSelected, timeout=1000) as blocker:
        panel.select(str(children[0]))
    assert blocker.args == [str(children[0])]

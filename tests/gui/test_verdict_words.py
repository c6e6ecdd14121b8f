"""One verdict vocabulary: a run whose image passed but that failed by drift says "ok · drift" in the verdict
badge, the runs history (a run and a study's run) and the sweep gallery — whose thumbnail, too small for the whole,
says "drift", never a bare "ok" inside its red failure frame."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QRect
from PySide6.QtGui import QColor, QImage, QPainter, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QStyleOptionViewItem

from ghostviewer.gui.models.history_model import RunEntry, StudyChild
from ghostviewer.gui.models.sweep_model import FAILED, RUN_DIR, VERDICT, SweepModel
from ghostviewer.gui.models.verdict_words import run_words
from ghostviewer.gui.widgets.sweep_gallery import GRID_CELL, ThumbnailDelegate
from ghostviewer.record.study_writer import StudyWriter
from tests.gui.fake_runs import write_fake_run

DRIFT = {"kind": "drift", "module": "unet.mid_block", "phase": "denoise", "step": 3}


def _drift_sweep(tmp_path: Path) -> Path:
    writer = StudyWriter.create(tmp_path, "sweep", {"prompts": ["p"], "seeds": [1, 2]}, total=2)
    for seed, anomaly in ((1, None), (2, DRIFT)):
        run = write_fake_run(writer.runs_dir, steps=2, seed=seed)
        writer.add_run(run, {"prompt": "p", "seed": seed},
                       summary={"status": "done", "verdict": {"label": "ok"}, "first_anomaly": anomaly})
    writer.finish("done")
    writer.close()
    return writer.path


def _thumbnail(words: str, side: int) -> QImage:
    """The gallery's grid thumbnail of a failed run whose verdict reads `words`, painted at its smallest."""
    model = QStandardItemModel()
    item = QStandardItem()
    item.setData(words, VERDICT)
    item.setData(True, FAILED)
    item.setData("run", RUN_DIR)
    model.appendRow(item)
    image = QImage(side, side, QImage.Format.Format_RGB32)
    image.fill(QColor("black"))
    painter = QPainter(image)
    option = QStyleOptionViewItem()
    option.rect = QRect(0, 0, side, side)
    ThumbnailDelegate(labels=False).paint(painter, option, model.index(0, 0))
    painter.end()
    return image


def test_a_run_failed_by_drift_says_drift_everywhere(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    assert run_words("done", "ok", DRIFT) == "ok · drift"
    entry = RunEntry("x", "run", "", "p", 2, 20, "done", "ok", None, first_anomaly=DRIFT)
    assert entry.state(None) == "ok · drift"  # the runs history
    assert StudyChild("x", 0, "member", "seed 2", 2, "done", "ok", DRIFT).state() == "ok · drift"  # a study's run
    model = SweepModel()
    model.open_study(_drift_sweep(tmp_path))
    healthy, drift = (model.index(i) for i in range(2))
    assert model.data(drift, FAILED) and model.data(drift, VERDICT) == "ok · drift"
    assert model.data(healthy, VERDICT) == "ok" and not model.data(healthy, FAILED)
    narrow = 36  # a cell with no room for "ok · drift": the word that failed it is kept, never a bare "ok"
    assert _thumbnail("ok · drift", narrow) == _thumbnail("drift", narrow)
    assert _thumbnail("ok · drift", narrow) != _thumbnail("ok", narrow)
    side = GRID_CELL[0]  # the grid's smallest cell (64 px and up): room for the whole words
    assert _thumbnail("ok · drift", side) != _thumbnail("drift", side)
    assert _thumbnail("ok · drift", side) != _thumbnail("ok", side)

"""Blocks ▸ right-click ▸ Isolate this module…: the command it sends, and the fuzz table it shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtGui import QColor

from ghostviewer.gui.coordinators.isolate_action import BROKEN
from tests.gui.fake_runs import write_fake_run


def _fuzz_case(vary: str, value: Any, broken: bool) -> dict[str, Any]:
    output = {"nan": 12 if broken else 0, "inf": 0, "std": None if broken else 1.2, "min": None, "max": None,
              "mean": None, "shape": [2, 4]}
    return {"vary": vary, "value": value, "output": output, "broken": broken, "why": "nan" if broken else None}


def test_context_menu_isolates_the_block_and_shows_the_fuzz_table(window, gui_env: Path, qtbot, tmp_path) -> None:  # noqa: ANN001
    run_dir = write_fake_run(gui_env, steps=4, nan_at=2, run_id="iso-run")
    window.state.timeline.open_run(run_dir)
    sent: list[tuple[str, dict[str, Any]]] = []
    window.state.engine.send = lambda cmd, **fields: sent.append((cmd, fields)) or 7
    window.isolate.ask_folder = lambda start: str(tmp_path / "isolated")

    menu = window.block_tree.context_menu("unet.mid_block.resnets.0")
    actions = [a for a in menu.actions() if a.text() == "Isolate this module…"]
    assert len(actions) == 1
    actions[0].trigger()
    assert sent == [("isolate", {"run_dir": str(run_dir), "module": "unet.mid_block.resnets.0", "step": 3,
                                 "out": str(tmp_path / "isolated"), "fuzz": True})]

    cases = [_fuzz_case("real", "as recorded", True), _fuzz_case("seq_len", 3, True), _fuzz_case("seq_len", 9, False)]
    event = {"event": "isolated", "id": 7, "module": "unet.mid_block.resnets.0", "class": "diffusers.X",
             "step": 3, "out_dir": str(tmp_path / "isolated"), "output": {"nan": 12, "inf": 0},
             "repro": str(tmp_path / "isolated" / "repro.py"), "faults": [],
             "fuzz": {"cases": cases, "broken": 2, "total": 3, "skipped": 0}}
    with qtbot.waitSignal(window.isolate.sigDialog, timeout=2000) as shown:
        window.state.engine._dispatch(json.dumps(event).encode())
    table = shown.args[0].table
    assert table.rowCount() == 3
    assert [table.item(r, 1).text() for r in range(3)] == ["as recorded", "3", "9"]
    assert table.item(1, 0).background().color() == QColor(BROKEN)
    assert table.item(2, 0).background().color() != QColor(BROKEN)
    assert window.state.controller.isolates.pending == {}


def test_an_isolation_without_the_users_hooks_says_so(window, gui_env: Path, qtbot, tmp_path) -> None:  # noqa: ANN001
    """A watched call's module isolated on the engine's pipeline (loaded from the folder, without the user's hooks):
    the window's line says what is missing, not only that nothing breaks."""
    run_dir = write_fake_run(gui_env, steps=4, nan_at=2, run_id="iso-hooked")
    window.state.timeline.open_run(run_dir)
    window.state.engine.send = lambda cmd, **fields: 8
    said: list[str] = []
    window.state.controller.sigMessage.connect(said.append)
    window.state.controller.isolates.isolate(str(run_dir), "unet.mid_block", 2, str(tmp_path / "iso"))
    hint = ("the watched pipeline had code of your own on its modules (poison on unet.mid_block), which a pipeline "
            "loaded from its folder lacks: re-run it with pipeline= (the object they are on)")
    event = {"event": "isolated", "id": 8, "module": "unet.mid_block", "class": "diffusers.X", "step": 2,
             "out_dir": str(tmp_path / "iso"), "output": {"nan": 0, "inf": 0}, "repro": None, "faults": [],
             "fuzz": {"cases": [], "broken": 0, "total": 45, "skipped": 0}, "missing_user_code": hint}
    window.state.engine._dispatch(json.dumps(event).encode())
    assert said and said[-1].startswith("Isolated unet.mid_block: 0 of 45") and f"Note: {hint}." in said[-1]

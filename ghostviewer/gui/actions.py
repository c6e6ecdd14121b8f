"""The window's actions (menu entries with their shortcuts) and the menus that hold them."""

from __future__ import annotations

from dataclasses import dataclass, fields

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QMainWindow, QMenu


@dataclass
class WindowActions:
    open_folder: QAction
    open_file: QAction
    use_demo: QAction
    open_run: QAction
    open_prompts: QAction
    runs_folder: QAction
    export_bundle: QAction
    quit: QAction
    run: QAction
    replay: QAction
    cancel: QAction
    decode: QAction
    play: QAction
    step_back: QAction
    step_forward: QAction
    first_step: QAction
    last_step: QAction
    jump_anomaly: QAction
    restart_engine: QAction
    about: QAction


def _action(window: QMainWindow, text: str, *shortcuts: str, tip: str = "") -> QAction:
    action = QAction(text, window)
    if shortcuts:
        action.setShortcuts([QKeySequence(s) for s in shortcuts])
    if tip:
        action.setStatusTip(tip)
    window.addAction(action)  # shortcuts work wherever the focus is in the window
    return action


def create_actions(window: QMainWindow) -> WindowActions:
    a = _action
    return WindowActions(
        open_folder=a(window, "Open pipeline &folder…", "Ctrl+O", tip="A diffusers folder (model_index.json)"),
        open_file=a(window, "Open pipeline f&ile…", "Ctrl+Shift+O", tip="A single-file .safetensors checkpoint"),
        use_demo=a(window, "Use the &demo pipeline", tip="The embedded 64×64 shapes pipeline"),
        open_run=a(window, "Open &run folder…", tip="Show a recorded run"),
        open_prompts=a(window, "Queue a &prompt list…", tip=".txt one prompt a line, .csv, .jsonl"),
        runs_folder=a(window, "Runs folder…", tip="Where runs are recorded and read back"),
        export_bundle=a(window, "&Export bug report…", "Ctrl+E",
                        tip="Save the shown run as a bug-report bundle (.zip) with a README and repro.py"),
        quit=a(window, "&Quit", "Ctrl+Q"),
        run=a(window, "&Run", "Ctrl+Return", "Ctrl+Enter", tip="Queue a run with the prompt panel's settings"),
        replay=a(window, "Re&play seed", "Ctrl+R", tip="Re-run the shown run with exactly its recorded settings"),
        cancel=a(window, "&Cancel running", "Ctrl+.", tip="Stop the running run after its current step"),
        decode=a(window, "&Decode this step", "Ctrl+D", tip="Full VAE decode of the shown step (engine)"),
        play=a(window, "Play / pause", "Space"),
        step_back=a(window, "Previous step", "Left"),
        step_forward=a(window, "Next step", "Right"),
        first_step=a(window, "First step", "Home"),
        last_step=a(window, "Last step", "End"),
        jump_anomaly=a(window, "&Jump to first anomaly", "Ctrl+J",
                       tip="Select the shown run's first anomaly: its module and step"),
        restart_engine=a(window, "Restart &engine", tip="Start a fresh engine process and reload the pipeline"),
        about=a(window, "&About GhostViewer"),
    )


def build_menus(window: QMainWindow, actions: WindowActions, docks: list[QDockWidget]) -> QMenu:
    """File, Run, View, Engine, Help. Returns the (empty) recent-pipelines menu for the window to fill."""
    bar = window.menuBar()
    file_menu = bar.addMenu("&File")
    for action in (actions.open_folder, actions.open_file, actions.use_demo):
        file_menu.addAction(action)
    recent = file_menu.addMenu("Recent pipelines")
    file_menu.addSeparator()
    for action in (actions.open_run, actions.open_prompts, actions.runs_folder):
        file_menu.addAction(action)
    file_menu.addSeparator()
    file_menu.addAction(actions.export_bundle)
    file_menu.addSeparator()
    file_menu.addAction(actions.quit)
    run_menu = bar.addMenu("&Run")
    for action in (actions.run, actions.replay, actions.cancel, actions.decode):
        run_menu.addAction(action)
    view_menu = bar.addMenu("&View")
    for action in (actions.play, actions.step_back, actions.step_forward, actions.first_step, actions.last_step,
                   actions.jump_anomaly):
        view_menu.addAction(action)
    view_menu.addSeparator()
    for dock in docks:
        view_menu.addAction(dock.toggleViewAction())
    bar.addMenu("&Engine").addAction(actions.restart_engine)
    bar.addMenu("&Help").addAction(actions.about)
    return recent


def all_actions(actions: WindowActions) -> list[QAction]:
    return [getattr(actions, f.name) for f in fields(actions)]

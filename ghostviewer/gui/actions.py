"""The window's actions (menu entries with their shortcuts) and the menus that hold them."""

from __future__ import annotations

from dataclasses import dataclass, fields

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QAbstractButton, QDockWidget, QMainWindow, QMenu


@dataclass
class WindowActions:
    open_folder: QAction
    open_file: QAction
    use_demo: QAction
    open_run: QAction
    open_bundle: QAction
    open_prompts: QAction
    runs_folder: QAction
    watch_folder: QAction  # checkable: on while the history follows a folder a program writes runs into
    export_bundle: QAction
    quit: QAction
    run: QAction
    replay: QAction
    replay_5: QAction
    replay_20: QAction
    cancel: QAction
    decode: QAction
    play: QAction
    step_back: QAction
    step_forward: QAction
    first_step: QAction
    last_step: QAction
    jump_anomaly: QAction
    compare_selected: QAction
    compare_with: QAction
    compare_reference: QAction
    judge_baseline: QAction
    probe: QAction
    bisect: QAction
    restart_engine: QAction
    about: QAction
    welcome: QAction
    reset_layout: QAction


def _action(window: QMainWindow, text: str, *shortcuts: str, tip: str = "", scoped: bool = False) -> QAction:
    """scoped: the shortcut works only inside the widget(s) the window adds the action to (navigation_actions:
    the timeline and image area), so plain keys (Space, arrows, Home, End) stay with trees, lists and fields."""
    action = QAction(text, window)
    if shortcuts:
        action.setShortcuts([QKeySequence(s) for s in shortcuts])
    if tip:
        action.setStatusTip(tip)
    if scoped:
        action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
    else:
        window.addAction(action)  # shortcuts work wherever the focus is in the window
    return action


def _checkable(action: QAction) -> QAction:
    action.setCheckable(True)
    return action


def create_actions(window: QMainWindow) -> WindowActions:
    a = _action
    return WindowActions(
        open_folder=a(window, "Open pipeline &folder…", "Ctrl+O", tip="A diffusers folder (model_index.json)"),
        open_file=a(window, "Open pipeline f&ile…", "Ctrl+Shift+O", tip="A single-file .safetensors checkpoint"),
        use_demo=a(window, "Use the &demo pipeline", tip="The embedded 64×64 shapes pipeline"),
        open_run=a(window, "Open &run folder…", tip="Show a recorded run"),
        open_bundle=a(window, "Open &bug report (.zip)…", tip="A bug report made with Export bug report…: its "
                      "runs shown read-only (nothing in it runs)"),
        open_prompts=a(window, "Queue a &prompt list…", tip=".txt one prompt a line, .csv, .jsonl"),
        runs_folder=a(window, "Runs folder…", tip="Where runs are recorded and read back"),
        watch_folder=_checkable(a(window, "&Watch folder…", tip="Follow a runs folder that a running program "
                                  "writes into (ghostviewer record --, ghostviewer.watch): new runs appear as they "
                                  "are written; again to stop")),
        export_bundle=a(window, "&Export bug report…", "Ctrl+E",
                        tip="Save the shown run as a bug-report bundle (.zip) with a README and repro.py"),
        quit=a(window, "&Quit", "Ctrl+Q"),
        run=a(window, "&Run", "Ctrl+Return", "Ctrl+Enter", tip="Queue a run with the prompt panel's settings"),
        replay=a(window, "Re&play seed", "Ctrl+R", tip="Re-run the shown run with exactly its recorded settings"),
        replay_5=a(window, "Replay 5 times", "Ctrl+Shift+R", tip="Re-run the shown run 5 times: does it reproduce?"),
        replay_20=a(window, "Replay 20 times", tip="Re-run the shown run 20 times: does it reproduce?"),
        cancel=a(window, "&Cancel running", "Ctrl+.", tip="Stop the running run after its current step"),
        decode=a(window, "&Decode this step", "Ctrl+D", tip="Full VAE decode of the shown step (engine)"),
        play=a(window, "Play / pause", "Space", scoped=True),
        step_back=a(window, "Previous step", "Left", scoped=True),
        step_forward=a(window, "Next step", "Right", scoped=True),
        first_step=a(window, "First step", "Home", scoped=True),
        last_step=a(window, "Last step", "End", scoped=True),
        jump_anomaly=a(window, "&Jump to first anomaly", "Ctrl+J",
                       tip="Select the shown run's first anomaly: its module and step"),
        compare_selected=a(window, "Co&mpare selected runs", "Ctrl+K",
                           tip="The two runs selected in the history side by side (Ctrl+click the second)"),
        compare_with=a(window, "Compare &with…", tip="The shown run beside a run picked in the Compare dock"),
        compare_reference=a(window, "Compare with a &known-good model…",
                            tip="Run the shown run's call on a pipeline folder you trust and show where the run "
                                "first leaves its range (Compare dock)"),
        judge_baseline=a(window, "Judge against &baseline file…",
                         tip="Make the shown run's call again, judged by a baseline file you pick: its verdict "
                             "and what it compared against"),
        probe=a(window, "&Probe the pipeline",
                tip="Ask the loaded pipeline the questions that need no baseline: does the prompt, the seed, the "
                    "guidance have an effect, is it deterministic, does float16 agree, does a batch give each image "
                    "as if made alone (a probe study; the report opens when done)"),
        bisect=a(window, "&Bisect by bypass", "Ctrl+B",
                 tip="Find the block whose bypass makes the shown failing run's symptom go away"),
        restart_engine=a(window, "Restart &engine", tip="Start a fresh engine process and reload the pipeline"),
        about=a(window, "&About GhostViewer"),
        welcome=a(window, "&Welcome: hunt your first ghost", tip="The guided tour on the demo pipeline"),
        reset_layout=a(window, "&Reset layout", tip="Put every dock back where it started, at its first size"),
    )


def build_menus(window: QMainWindow, actions: WindowActions, docks: list[QDockWidget]) -> QMenu:
    """File, Run, View, Engine, Help. Returns the (empty) recent-pipelines menu for the window to fill."""
    bar = window.menuBar()
    file_menu = bar.addMenu("&File")
    for action in (actions.open_folder, actions.open_file, actions.use_demo):
        file_menu.addAction(action)
    recent = file_menu.addMenu("Recent pipelines")
    file_menu.addSeparator()
    for action in (actions.open_run, actions.open_bundle, actions.open_prompts, actions.runs_folder,
                   actions.watch_folder):
        file_menu.addAction(action)
    file_menu.addSeparator()
    file_menu.addAction(actions.export_bundle)
    file_menu.addSeparator()
    file_menu.addAction(actions.quit)
    run_menu = bar.addMenu("&Run")
    for action in (actions.run, actions.replay):
        run_menu.addAction(action)
    times = run_menu.addMenu("Replay &N times")
    for action in (actions.replay, actions.replay_5, actions.replay_20):
        times.addAction(action)
    for action in (actions.cancel, actions.decode):
        run_menu.addAction(action)
    run_menu.addSeparator()
    for action in (actions.compare_selected, actions.compare_with, actions.compare_reference,
                   actions.judge_baseline, actions.probe, actions.bisect):
        run_menu.addAction(action)
    view_menu = bar.addMenu("&View")
    for action in (actions.play, actions.step_back, actions.step_forward, actions.first_step, actions.last_step,
                   actions.jump_anomaly):
        view_menu.addAction(action)
    view_menu.addSeparator()
    for dock in docks:
        view_menu.addAction(dock.toggleViewAction())
    bar.addMenu("&Engine").addAction(actions.restart_engine)
    view_menu.addSeparator()
    view_menu.addAction(actions.reset_layout)
    help_menu = bar.addMenu("&Help")
    help_menu.addAction(actions.welcome)
    help_menu.addAction(actions.about)
    return recent


def replay_menu(window: QMainWindow, actions: WindowActions) -> QMenu:
    """Replay once, 5 or 20 times: the Replay button's drop-down."""
    menu = QMenu(window)
    for action in (actions.replay, actions.replay_5, actions.replay_20):
        menu.addAction(action)
    return menu


def gate_replay(actions: WindowActions, button: QAbstractButton, shown: bool, allowed: bool, why: str) -> None:
    """Replay (the Run menu's entries and the timeline's button) offered only when the shown run may be replayed
    (a bug report's run: on its own weights); `why` (which component differs, or that they match) in the tips."""
    for action in (actions.replay, actions.replay_5, actions.replay_20):
        action.setEnabled(shown and allowed)
        action.setToolTip(why or action.statusTip())
    button.setEnabled(shown and allowed)
    button.setToolTip(why or REPLAY_TIP)


REPLAY_TIP = "Re-run with exactly the recorded settings (Ctrl+R)"  # the timeline's Replay button


def all_actions(actions: WindowActions) -> list[QAction]:
    return [getattr(actions, f.name) for f in fields(actions)]


def navigation_actions(actions: WindowActions) -> list[QAction]:
    """The scoped ones: the window adds them to the timeline and image area."""
    return [actions.play, actions.step_back, actions.step_forward, actions.first_step, actions.last_step]


def shortcut_lines(actions: WindowActions) -> list[tuple[str, str]]:
    """(keys, what) for every action with a shortcut, for Help ▸ About."""
    lines = []
    for action in all_actions(actions):
        keys = " / ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts())
        if keys:
            scope = " (timeline and images)" if action in navigation_actions(actions) else ""
            lines.append((keys, action.text().replace("&", "") + scope))
    return lines

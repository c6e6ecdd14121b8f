"""The first-run welcome: a side panel (a dock in the left column, over the Pipeline panel the tour does not need)
that loads the demo pipeline and walks a new user through one ghost, step by step — run it, read the verdict, find
it in the heat map, jump to it (Ctrl+J), bypass the culprit in Blocks, run again, then replay / bisect / bundle. A
dock, not a dialog: it never covers the images, badge, heat map or Blocks it asks you to read. Shown once, on the
first launch; Help ▸ Welcome afterwards.

The ghost is the ghost lab's `short-prompt-attention`: for prompts of at most two words a cross-attention block
divides 0 by 0, the run turns NaN at step 0 in unet.down_blocks.1.attentions.0, and bypassing that block cures it.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QGridLayout, QPushButton, QTextBrowser, QVBoxLayout, QWidget

from ghostviewer.gui.window_layout import hide_stray_tab_bars

TOUR_GHOST = "short-prompt-attention"
TOUR_PROMPT = {"prompt": "red circle", "negative": "", "seed": 7, "seed_locked": True, "steps": 20,
               "fault": TOUR_GHOST}
SHOWN_KEY = "welcome_shown"

INTRO = """
<h3>Hunt your first ghost</h3>
<p>GhostViewer records a diffusion run module by module and step by step, so an intermittent bug — the black
image once in ten runs — can be found, not guessed. The demo pipeline comes with known ghosts to learn on.
Follow the steps; each button does the step for you, or use the menus named.</p>
<ol>
<li><b>Set up the ghost.</b> The demo pipeline, the prompt <i>red circle</i>, seed 7, and the ghost
<i>{ghost}</i> in the prompt panel's <b>Ghost</b> choice. The Run button now says
<b>Run (ghost: {ghost})</b>: a ghost is never injected without you seeing it (and never remembered
across launches).</li>
<li><b>Run it</b> (Ctrl+Enter). The badge under the images gives the verdict — <b>nan</b>, in red — and the
line above them the <b>first anomaly</b>: what went wrong first, where, at which step.</li>
<li><b>Look at the heat map</b> (Heat map dock): rows are modules in execution order (text encoder, U-Net, VAE),
columns are <i>enc</i>, the denoising steps from 0, and <i>dec</i>. Red cells hold NaN or Inf; the dotted
outline is the first anomaly.</li>
<li><b>Jump to it</b> (Ctrl+J, View ▸ Jump to first anomaly): the timeline goes to its step, and the Blocks
tree, heat map and plot select its module — <i>unet.down_blocks.1.attentions.0</i>.</li>
<li><b>Bypass it</b>: tick that block in the <b>Blocks</b> dock (the Run button says <i>1 bypass</i>), then
Run again. The image comes back: the ghost lives in that block.</li>
<li><b>Make it a bug report.</b> {more}</li>
</ol>
<p>Untick the bypass and set Ghost back to <i>none</i> when you are done. Help ▸ Welcome shows this again.</p>
"""
MORE = {
    "replay": "<b>Run ▸ Replay seed</b> (Ctrl+R) re-runs the shown run with exactly its settings: does it reproduce?",
    "bisect": "<b>Run ▸ Bisect by bypass</b> (Ctrl+B) finds the culprit block by itself.",
    "compare_selected": "<b>Run ▸ Compare selected runs</b> (Ctrl+K) puts the bad run and the cured one side by side.",
    "export_bundle": "<b>File ▸ Export bug report</b> (Ctrl+E) saves the run as a .zip with a README and repro.py.",
}


def tour_steps_text(actions: Any) -> str:
    """The walkthrough, naming only the menu entries this window has."""
    more = " ".join(text for name, text in MORE.items() if hasattr(actions, name))
    return INTRO.format(ghost=TOUR_GHOST, more=more)


def set_up_tour(state: Any) -> None:
    """Demo pipeline, the tour's prompt and ghost, no ticks left from before."""
    state.pipeline.set_source("demo")
    state.blocks.clear_ticks()
    state.prompt.update(**TOUR_PROMPT)


def bypass_culprit(state: Any) -> bool:
    """Tick a bypass on the shown run's first-anomaly block (False when there is none to tick)."""
    module = state.blocks.anomaly
    return bool(module) and state.blocks.set_bypass(module, True)


TOUR_HEIGHT_PX = 330  # the panel's share of the left column: the Prompt panel below keeps its Ghost field and Run


class WelcomePanel(QWidget):
    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window_, state = window, window.state
        self.setWindowTitle("Welcome")
        self.text = QTextBrowser(openExternalLinks=False)
        self.text.setHtml(tour_steps_text(window.actions))
        buttons = QGridLayout()
        self.buttons: dict[str, QPushButton] = {}
        for key, label, slot in (
                ("setup", "1 · Set up the ghost", lambda: set_up_tour(state)),
                ("run", "2 · Run it", window.actions.run.trigger),
                ("heatmap", "3 · Heat map", lambda: self._bring("Heat map")),
                ("jump", "4 · Jump to it", window.actions.jump_anomaly.trigger),
                ("bypass", "5 · Bypass it", self._bypass),
                ("close", "Close", self.close)):
            button = QPushButton(label)
            button.clicked.connect(slot)
            buttons.addWidget(button, len(self.buttons) // 2, len(self.buttons) % 2)  # two a row: a narrow column
            self.buttons[key] = button
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.text, 1)
        layout.addLayout(buttons)
        self.dock: QDockWidget | None = None

    def close(self) -> bool:  # noqa: D102 - the panel closes with its dock
        if self.dock is not None:
            self.dock.hide()
            QTimer.singleShot(0, self.window_, lambda: hide_stray_tab_bars(self.window_))  # its tab bar goes too
        return super().close()

    def _bring(self, title: str) -> None:
        for dock in self.window_.docks:
            if dock.windowTitle() == title:
                dock.show()
                dock.raise_()

    def _bypass(self) -> None:
        if bypass_culprit(self.window_.state):
            self.window_.state.blocks.select(self.window_.state.blocks.anomaly)
            self._bring("Blocks")


def show_welcome(window: Any) -> WelcomePanel:
    """The tour in the left column, in front of the Pipeline panel (tabbed with it), tall enough to read."""
    panel = getattr(window, "welcome_dialog", None)
    if panel is None:
        panel = window.welcome_dialog = WelcomePanel(window)
        dock = panel.dock = QDockWidget("Welcome", window)
        dock.setObjectName("dock-welcome")
        dock.setWidget(panel)
        window.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock)
        pipeline = next((d for d in window.docks if d.windowTitle() == "Pipeline"), None)
        if pipeline is not None:
            window.tabifyDockWidget(pipeline, dock)
    dock = panel.dock
    dock.show()
    panel.show()
    dock.raise_()
    queue = next((d for d in window.docks if d.windowTitle() == "Run queue"), None)
    shown = [dock] + ([queue] if queue is not None else [])  # the queue, empty on a first launch, gives way
    window.resizeDocks(shown, [TOUR_HEIGHT_PX, 90][:len(shown)], Qt.Orientation.Vertical)
    return panel


def welcome_once(window: Any) -> WelcomePanel | None:
    """On the first launch only (remembered in the settings); Help ▸ Welcome afterwards."""
    settings = window.state.settings
    if settings.get_json(SHOWN_KEY, False):
        return None
    settings.set_json(SHOWN_KEY, True)
    return show_welcome(window)

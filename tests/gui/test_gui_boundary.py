"""The GUI process never imports torch: the boundary of DESIGN.md, checked in a fresh interpreter (importing the
window's modules, then making and showing a window; tests/test_layering.py checks the other layers)."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = """
import gc, sys
gc.disable()  # no collections: the question is only what gets imported
import ghostviewer.gui.app, ghostviewer.gui.main_window, ghostviewer.gui.link.engine_client
from ghostviewer.gui.app import application, create_window
app = application()
window = create_window(dialogs=False)
window.show()
app.processEvents()
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'diffusers', 'transformers', 'accelerate'))
print('LEAKED', bad, flush=True)
import os
os._exit(0)  # the question is the imports: no interpreter teardown with live Qt objects (it can crash under load)
"""


def test_gui_never_imports_torch(gui_env) -> None:  # noqa: ANN001
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert result.returncode == 0, result.stderr
    assert "LEAKED []" in result.stdout, result.stdout

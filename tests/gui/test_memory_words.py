"""The engine's memory refusal, as the window says it: no command-line option (a window user cannot pass
--no-memory-check); what to change in the window instead."""

from __future__ import annotations

import pytest

from ghostviewer.gui.link.job_scheduler import window_words
from ghostviewer.spec.checks import DenoiserShape, check_memory


def test_the_memory_refusal_names_window_settings_not_cli_options() -> None:
    with pytest.raises(Exception) as refused:  # noqa: PT011 - the spec's own SettingsError
        check_memory(4096, 4096, 7.5, DenoiserShape(), available=1 << 20, where="cpu")
    engine_text = str(refused.value)
    assert "--no-memory-check" in engine_text  # what the CLI says (the spec's words)
    words = window_words(engine_text)
    assert "--no-memory-check" not in words and "memory_check" not in words, words
    assert "Size (w×h)" in words and words.startswith("4096x4096 needs about")

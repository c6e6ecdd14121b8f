"""The window asks before a prompt list reads files outside its folder: dropped for the queue or swept, such a list
queues nothing and says which file, with a "Queue it anyway" ("Sweep it anyway") button that queues it (or sends
the sweep, marked allowed, to the engine); a list whose files are beside it queues at once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from ghostviewer.gui import messages
from tests.gui.as_new import as_new_window, as_new_windows

_as_new_windows = as_new_windows()
window = as_new_window()


def _lists(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(a list naming a private image, a list naming one beside it, the private image)."""
    private = tmp_path / "private" / "photo.png"
    for image in (private, tmp_path / "shared" / "init.png"):
        image.parent.mkdir(exist_ok=True)
        Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(image)
    outside, beside = tmp_path / "shared" / "outside.jsonl", tmp_path / "shared" / "beside.jsonl"
    outside.write_text(json.dumps({"prompt": "a cat", "init_image": str(private)}) + "\n", encoding="utf-8")
    beside.write_text(json.dumps({"prompt": "a cat", "init_image": "init.png"}) + "\n", encoding="utf-8")
    return outside, beside, private


def test_a_queued_list_reading_outside_files_waits_for_the_users_word(window, tmp_path: Path) -> None:  # noqa: ANN001
    outside, beside, private = _lists(tmp_path)
    state = window.state
    assert state.opener.queue_prompt_list(outside) == [] and state.queue.jobs() == []
    message = state.reporter.last_message
    assert message == messages.PROMPT_LIST_OUTSIDE.format(name="outside.jsonl", file=private)
    (label, read_anyway), = state.reporter.remedies(message)
    assert label == messages.QUEUE_OUTSIDE
    read_anyway()
    (job,) = state.queue.jobs()
    assert job.settings["init_image"] == str(private) and job.settings["prompt"] == "a cat"
    state.controller.cancel(job.id)
    said = len(state.reporter.messages)
    assert len(state.opener.queue_prompt_list(beside)) == 1  # its files beside it: no question
    assert state.reporter.messages[said:] == []
    for queued in state.queue.jobs():
        state.controller.cancel(queued.id)


def test_a_swept_list_reading_outside_files_is_sent_only_when_allowed(window, tmp_path: Path) -> None:  # noqa: ANN001
    outside, _, private = _lists(tmp_path)
    sweeps = window.state.opener.sweeps
    assert sweeps.start(outside, seeds="0-1") is False and sweeps.state == "idle"
    message = window.state.reporter.last_message
    assert message == messages.SWEEP_LIST_OUTSIDE.format(name="outside.jsonl", file=private)
    (label, read_anyway), = window.state.reporter.remedies(message)
    assert label == messages.SWEEP_OUTSIDE
    read_anyway()
    assert sweeps.state == "waiting" and sweeps._pending["outside_files"] is True  # no engine: it waits for one
    assert sweeps._pending["seeds"] == "0-1"
    sweeps.cancel()

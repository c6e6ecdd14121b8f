"""The engine process's command loop: a `quit` drops what is queued behind the running job — a window that closes
while runs wait is not kept waiting for them (it would give up after its stop timeout and kill the engine) —
while, until a quit comes, queued commands are carried out in order. Real EngineSession, real reader, in process."""

from __future__ import annotations

import io
import json
import queue
from typing import Any

from ghostviewer.engine.server import Emitter, EngineSession, read_commands, serve

RUNS = [{"cmd": "run", "id": "r1", "settings": {"prompt": "a red circle"}},
        {"cmd": "run", "id": "r2", "settings": {"prompt": "a blue square"}}]


def _events(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _engine() -> tuple[io.StringIO, Emitter, EngineSession, queue.Queue[dict[str, Any]]]:
    out = io.StringIO()
    emit = Emitter(out)
    return out, emit, EngineSession(emit), queue.Queue()


def test_commands_queued_before_a_quit_never_start() -> None:
    out, emit, session, commands = _engine()
    lines = "".join(json.dumps(c) + "\n" for c in [*RUNS, {"cmd": "quit", "id": "q"}])
    read_commands(io.StringIO(lines), commands, session, emit)
    assert session.stopping and commands.qsize() == 3
    assert serve(commands, session, emit) == 0
    assert _events(out) == [{"event": "bye", "id": "q"}]


def test_the_end_of_the_pipe_is_a_quit_too() -> None:
    out, emit, session, commands = _engine()
    read_commands(io.StringIO(json.dumps(RUNS[0]) + "\n"), commands, session, emit)  # then EOF: the GUI is gone
    assert serve(commands, session, emit) == 0 and _events(out) == [{"event": "bye", "id": None}]


def test_until_a_quit_comes_queued_commands_are_carried_out_in_order() -> None:
    out, emit, session, commands = _engine()
    for command in [*RUNS, {"cmd": "quit", "id": "q"}]:  # queued as the reader queues them, no quit read yet
        commands.put(command)
    assert serve(commands, session, emit) == 0
    events = _events(out)
    assert [(e["event"], e.get("id")) for e in events] == [("failed", "r1"), ("failed", "r2"), ("bye", "q")]
    assert all("no pipeline is loaded" in e["error"] for e in events[:2]), events  # each run was taken up

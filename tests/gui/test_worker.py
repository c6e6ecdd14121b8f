"""The GUI's one Worker: plain functions run off the GUI thread with a cancel token, answers (results and
exceptions) delivered on the GUI thread, only the newest wish answered when asked, and a synchronous mode."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from ghostviewer.gui.link.worker import Cancelled, Task, Worker

GUI = Path(__file__).resolve().parents[2] / "ghostviewer" / "gui"


def test_a_function_runs_off_the_gui_thread_and_answers_on_it(qtbot) -> None:  # noqa: ANN001
    worker = Worker(1)
    answers: list[tuple[object, object, int]] = []
    worker.answered.connect(lambda tag, result: answers.append((tag, result, threading.get_ident())))
    with qtbot.waitSignal(worker.answered, timeout=5000):
        worker.submit("t", lambda task: (threading.get_ident(), task.tag))
    (tag, (ran_on, seen_tag), answered_on), = answers
    assert tag == seen_tag == "t" and ran_on != threading.get_ident() and answered_on == threading.get_ident()
    assert not worker.busy


def test_synchronous_answers_before_submit_returns(qtbot) -> None:  # noqa: ANN001
    worker = Worker(1, synchronous=True)
    answers: list[tuple[object, object]] = []
    worker.answered.connect(lambda tag, result: answers.append((tag, result)))
    worker.submit(1, lambda _task: threading.get_ident())
    assert answers == [(1, threading.get_ident())] and not worker.busy


def test_exceptions_are_answered_and_only_unexpected_ones_logged(qtbot, caplog: pytest.LogCaptureFixture) -> None:  # noqa: ANN001
    worker = Worker(1, synchronous=True, what="reading a thing", expected=(OSError,))
    answers: list[object] = []
    worker.answered.connect(lambda _tag, result: answers.append(result))

    def fails(error: Exception) -> None:
        raise error

    worker.submit("expected", lambda _task: fails(OSError("gone")))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    worker.submit("bug", lambda _task: fails(ZeroDivisionError("oops")))
    assert [type(a) for a in answers] == [OSError, ZeroDivisionError]
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.getMessage() == "reading a thing failed" and record.exc_info is not None


def test_latest_cancels_the_wishes_before_it(qtbot) -> None:  # noqa: ANN001
    worker = Worker(1, latest=True)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []
    answers: list[object] = []
    worker.answered.connect(lambda tag, _result: answers.append(tag))

    def slow(task: Task) -> str:
        started.set()
        release.wait(5)
        task.check()  # cancelled meanwhile: raises Cancelled, and nothing answers
        ran.append("slow")
        return "slow"

    first = worker.submit("slow", slow)
    assert started.wait(5)
    queued = worker.submit("queued", lambda _task: ran.append("queued"))  # cancels the running one
    newest = worker.submit("newest", lambda _task: ran.append("newest"))  # cancels the queued one
    assert first.cancelled and queued.cancelled and not newest.cancelled and worker.busy
    release.set()
    qtbot.waitUntil(lambda: not worker.busy, timeout=5000)
    qtbot.wait(50)  # any late answer of a cancelled task would be queued by now
    assert answers == ["newest"] and ran == ["newest"] and worker.dropped == 1  # the slow one's Cancelled
    worker.shutdown()


def test_a_cancelled_token_raises() -> None:
    task = Task("x")
    task.check()
    task.cancel()
    with pytest.raises(Cancelled):
        task.check()


def test_the_gui_has_one_way_off_its_thread() -> None:
    """Every thread of the GUI is the Worker's: no other file starts a pool, a runnable or a thread."""
    banned = ("QThreadPool", "QRunnable", "QThread(", "threading.Thread", "concurrent.futures")
    users = sorted(str(path.relative_to(GUI)) for path in GUI.rglob("*.py")
                   if any(word in path.read_text(encoding="utf-8") for word in banned))
    assert users == ["link/worker.py"]

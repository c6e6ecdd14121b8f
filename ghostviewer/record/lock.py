"""The writer's lock on a run or study folder: held for the writer's whole life, so that a reader can tell a
record still being written from one whose process died (CONTRACT: status `interrupted`).

POSIX: an exclusive `flock` on `run.lock` in the folder. The kernel drops it when the process dies, whatever
killed it (SIGKILL, out of memory, power loss of a network mount aside). A reader that can take the lock while
the record says 'running' knows the writer is gone. `flock` locks belong to the open file, not the process, so a
reader in the writer's own process sees the lock as held too. Windows (no fcntl): the lock file holds the
writer's pid and start time, and a reader asks psutil whether that process still lives.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from .errors import RecordError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = "run.lock"
_ACQUIRE_WAIT_S = 1.0  # a reader holds the lock for microseconds while it checks: wait that out


def _process_started(pid: int) -> float | None:
    import psutil  # only on the fallback path: the record package stays light

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def refuse_links(folder: Path, names: tuple[str, ...], what: str) -> None:
    """The rule for writing into an existing record: its folder and the named files and folders in it are real, never
    links (writing through one would change a record somewhere else); RecordError, in one line, otherwise."""
    for path in (Path(folder), *(Path(folder) / name for name in names)):
        if os.path.islink(path):
            raise RecordError(f"{what} {Path(folder).name} has a link in place of {path.name}; GhostViewer writes "
                              "into a record only through real files and folders")


class WriterLock:
    """Held by a live writer; `release()` (or the writer's end, or its process's death) lets it go."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, folder: Path, what: str = "record") -> WriterLock:
        """Create (or open) the folder's lock file and hold it; RecordError if a live writer already does."""
        path = Path(folder) / LOCK_NAME
        try:
            # never through a link: the lock file is written to, and a link could point at anything
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            raise RecordError(f"cannot create the lock file of {what} {path.parent}: {exc.strerror or exc}") from exc
        if fcntl is not None:
            deadline = time.monotonic() + _ACQUIRE_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        os.close(fd)
                        raise RecordError(f"{what} {path.parent.name} is being written by another process") from None
                    time.sleep(0.01)
                except OSError:
                    break  # a file system without locks: the record still works, it just cannot say 'interrupted'
        elif writer_alive(path.parent) is True:
            os.close(fd)
            raise RecordError(f"{what} {path.parent.name} is being written by another process")
        owner = {"pid": os.getpid(), "started": _process_started(os.getpid()) if fcntl is None else None}
        with contextlib.suppress(OSError):  # for people (and the Windows fallback): who holds it
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(owner).encode())
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let the lock go (closing the file drops the flock). The file stays: readers look for it."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                if fcntl is None:
                    os.ftruncate(fd, 0)  # no pid left behind to be mistaken for a live writer
                os.close(fd)

    def __del__(self) -> None:  # a writer dropped without finishing is a writer gone
        try:
            self.release()
        except Exception:  # noqa: BLE001 - at interpreter exit the os module may already be gone
            pass


def writer_alive(folder: str | Path) -> bool | None:
    """True: a live process holds the folder's lock. False: none does (or there is no lock file: made by a
    GhostViewer without locks, or copied out of a bundle). None: this file system cannot tell."""
    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        if fcntl is None:
            return _pid_alive(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        return False
    finally:
        os.close(fd)


def live_status(folder: str | Path, stored: object, reread: Callable[[], object]) -> str:
    """The status a reader reports: the stored one, except 'running' without a live writer → 'interrupted'.
    `reread` fetches the stored status again: the writer may have finished between the two looks."""
    status = str(stored or "running")
    if status != "running" or writer_alive(folder) is not False:
        return status
    again = str(reread() or "running")
    return "interrupted" if again == "running" else again


def _pid_alive(fd: int) -> bool | None:
    try:
        owner = json.loads(os.read(fd, 4096) or b"{}")
        pid, started = int(owner["pid"]), owner.get("started")
    except (OSError, ValueError, KeyError, TypeError):
        return False  # empty (released) or unreadable: nobody holds it
    now = _process_started(pid)
    return now is not None and (started is None or abs(now - float(started)) < 1.0)

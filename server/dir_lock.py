"""The data-dir lock: one server process per `--data-dir`. A second server started on a directory
another process holds is refused at start, with the directory and the holder's pid.

`DIR/lock` carries an exclusive `fcntl` record lock (POSIX `lockf`) and the holder's pid as text.
The kernel releases the lock when the holding process ends, however it ends (`kill -9`, a crash),
so a stale `lock` file never blocks a restart. A POSIX lock belongs to the process, and closing any
descriptor of the file releases it: hosts of one process on one directory (tests that simulate a
crash by dropping a host and opening another) share one descriptor, counted here.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

LOCK_FILE = "lock"

_held: dict[Path, list[int]] = {}  # resolved dir → [descriptor, holders in this process]
_guard = threading.Lock()


class DataDirLocked(OSError):
    """Another process holds the data dir."""


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


class DataDirLock:
    """Held from construction until `release` (the server's stop; the process's end releases it anyway)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(data_dir).resolve()
        self.released = False
        with _guard:
            held = _held.get(self.dir)
            if held is not None:
                held[1] += 1
                return
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pid = _holder(fd)
                os.close(fd)
                raise DataDirLocked(
                    f"data dir {self.dir} is in use by another cqlstream server (pid {pid}): stop it, or "
                    "start this one with another --data-dir"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            _held[self.dir] = [fd, 1]

    def release(self) -> None:
        with _guard:
            if self.released:
                return
            self.released = True
            held = _held.get(self.dir)
            if held is None:
                return
            held[1] -= 1
            if held[1] == 0:
                del _held[self.dir]
                os.close(held[0])  # closing the descriptor drops the lock; the file stays (harmless)

"""The child processes of the test process (running, or exited and not yet reaped), read from /proc:
tests that a run's reader and writer processes do not outlive it."""

from __future__ import annotations

import os
from pathlib import Path


def children(marker: bytes | None = None) -> set[int]:
    """Pids of this process's children; with `marker`, only those whose command line holds it (a
    spawned `python -m MODULE`; a forked child has its parent's command line and no marker)."""
    me = os.getpid()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmd = (entry / "cmdline").read_bytes() if marker is not None else b""
        except OSError:
            continue
        ppid = next((int(x.split()[1]) for x in status.splitlines() if x.startswith("PPid:")), None)
        if ppid == me and (marker is None or marker in cmd):
            found.add(int(entry.name))
    return found

"""`cqlstream serve --demo` as a child process for tests: started on a free port of 127.0.0.1,
waited for until the demo shop prints its first big orders, stopped with SIGTERM afterwards."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HEADER_LINES = 4  # the demo's banner; big orders follow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_demo(
    cqlstream: str, cwd: Path | None = None, env: dict[str, str] | None = None, wait: float = 30
) -> Iterator[tuple[str, list[str]]]:
    """(the server's URL, its printed lines so far) once big orders are printed, within `wait` s."""
    port = free_port()
    proc = subprocess.Popen(
        [cqlstream, "serve", "--demo", "--port", str(port), "--log-level", "warning"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(out.readline, "")), daemon=True).start()
    try:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and len(lines) <= HEADER_LINES:
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        assert lines and lines[0].startswith("demo shop: streams Orders, Clicks, relation Items"), "".join(lines)
        assert len(lines) > HEADER_LINES, f"no big order printed within {wait} s:\n" + "".join(lines)
        yield f"http://127.0.0.1:{port}", lines
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

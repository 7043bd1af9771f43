"""`cqlstream serve --demo` as a child process for tests: started on a free port of 127.0.0.1,
waited for until the demo shop prints its first big orders, stopped with SIGTERM afterwards (it
must then exit 0: the demo cleans up on SIGTERM as on Ctrl-C)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FIRST_LINE = "demo shop: streams Orders, Clicks, relation Items"
# a big order as the demo prints it: time, item, quantity, value
BIG_ORDER = re.compile(r"^  \d\d:\d\d:\d\d  [a-z]+ +\d+ +\d+\.\d\d$")
SPARK_WAIT = 150  # seconds: Spark starts in 10-60 s on a busy machine, the first big orders follow
HTTP_WAIT = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def big_orders(lines: list[str]) -> list[str]:
    return [line for line in lines if BIG_ORDER.match(line.rstrip("\n"))]


@contextmanager
def running_demo(
    cqlstream: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    spark: bool = True,
    wait: float | None = None,
    extra: tuple[str, ...] = (),
) -> Iterator[tuple[str, list[str]]]:
    """(the server's URL, its printed lines so far, growing) once big orders are printed, within
    `wait` s (default: SPARK_WAIT with Spark, HTTP_WAIT with `spark=False`, i.e. --no-spark)."""
    wait = wait if wait is not None else (SPARK_WAIT if spark else HTTP_WAIT)
    port = free_port()
    args = [cqlstream, "serve", "--demo", "--port", str(port), "--log-level", "warning", *extra]
    proc = subprocess.Popen(
        [*args, *([] if spark else ["--no-spark"])],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(out.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not big_orders(lines):
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        assert any(line.startswith(FIRST_LINE) for line in lines), "".join(lines)
        assert big_orders(lines), f"no big order printed within {wait} s:\n" + "".join(lines)
        yield f"http://127.0.0.1:{port}", lines
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)  # Spark stops its streaming queries, then the session
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        reader.join(10)
    assert code == 0, f"the demo exited {code} on SIGTERM:\n" + "".join(lines)

"""`cqlstream serve` as a child process for the benchmarks: on a free 127.0.0.1 port, ready once
/healthz answers (at most 30 s), stopped with SIGTERM (killed after 15 s); and a process's memory
from /proc."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    """(the process, its URL) once it answers; `args` are more `serve` options."""
    port = free_port()
    cmd = [sys.executable, "-m", "cqlstream", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--log-level", "warning", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            stop(proc)
            raise RuntimeError("the server did not start")
        time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@contextmanager
def serving(*args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`start`, then `stop` whatever happens."""
    proc, url = start(*args)
    try:
        yield proc, url
    finally:
        stop(proc)


def memory(pid: int, key: str = "VmRSS:") -> int:
    """Bytes of a /proc/PID/status line (VmRSS: resident now, VmHWM: its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) << 10
    return 0

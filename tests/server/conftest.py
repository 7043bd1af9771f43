"""Fixtures for the server tests: a REAL uvicorn server on 127.0.0.1 (a free port, in a thread of
this process, or a `cqlstream serve` subprocess), clients, and a per-test time limit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from cqlstream.server.app import create_app
from cqlstream.server.runner import Server
from cqlstream.server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
TEST_TIMEOUT = 60  # seconds per test (the schemathesis test sets its own, larger limit)


@pytest.fixture(autouse=True)
def _time_limit(request):
    """Every server test is bounded in time: SIGALRM fails it (and interrupts blocking reads)."""
    limit = getattr(request.node.get_closest_marker("time_limit"), "args", (TEST_TIMEOUT,))[0]

    def expire(signum, frame):
        raise TimeoutError(f"test exceeded {limit} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pytest_configure(config):
    config.addinivalue_line("markers", "time_limit(seconds): per-test time limit of the server tests")


def free_socket() -> socket.socket:
    # proto=IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says TCP, and without it every reply waits ~40 ms on Nagle + delayed ACK
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


class ServerThread:
    """uvicorn serving create_app(settings) on a pre-bound 127.0.0.1 socket, in a background thread."""

    def __init__(self, settings: Settings | None = None, dsms=None):
        self.sock = free_socket()
        self.port = self.sock.getsockname()[1]
        self.settings = settings or Settings()
        self.app = create_app(dsms, settings=self.settings) if dsms is not None else create_app(self.settings)
        self.host = self.app.state.host
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
        self.server = Server(config, self.host)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        try:
            self.sock.close()
        except OSError:
            pass

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 20.0), **kw)


@pytest.fixture
def make_server():
    started: list[ServerThread] = []

    def make(**settings) -> ServerThread:
        dsms = settings.pop("dsms", None)
        s = ServerThread(Settings(**settings), dsms).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def server(make_server) -> ServerThread:
    return make_server()


@pytest.fixture
def http(server):
    with server.client() as c:
        yield c


class ServerProcess:
    """`cqlstream serve` in a subprocess on a free 127.0.0.1 port."""

    def __init__(self, *args: str):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{self.port}"
        exe = [
            sys.executable,
            "-m",
            "cqlstream",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
            *args,
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(exe, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 40) -> ServerProcess:
        """Poll /healthz until it answers (bounded: a loaded machine has taken over 20 s to start one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stdout.read().decode(errors='replace')}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


@pytest.fixture
def spawn_server():
    procs: list[ServerProcess] = []

    def spawn(*args: str) -> ServerProcess:
        p = ServerProcess(*args)
        procs.append(p)
        return p.wait_ready()

    yield spawn
    for p in procs:
        p.stop()

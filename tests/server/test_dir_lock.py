"""The data-dir lock with real processes: a second `cqlstream serve` on a data dir a running server
holds is refused at start (naming the directory and the holder's pid); the lock goes with its
holder, after a clean stop and after `kill -9` alike."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.server.conftest import ROOT, ServerProcess


def _refused(data_dir: str) -> str:
    """Start a second server on `data_dir`; it must exit at start with a message (returned)."""
    p = ServerProcess("--data-dir", data_dir)
    try:
        out, _ = p.proc.communicate(timeout=30)
    finally:
        p.stop()
    assert p.proc.returncode == 2, out
    return out.decode(errors="replace")


def test_second_server_refused_then_lock_released_by_kill_9(tmp_path):
    d = tmp_path / "data"
    first = ServerProcess("--data-dir", str(d)).wait_ready()
    try:
        msg = _refused(str(d))
        assert str(d.resolve()) in msg and f"pid {first.proc.pid}" in msg, msg
        assert "in use by another cqlstream server" in msg
        first.proc.send_signal(signal.SIGKILL)  # no clean stop: the kernel releases the lock
        first.proc.wait(timeout=10)
        second = ServerProcess("--data-dir", str(d)).wait_ready()  # starts: the old holder is gone
        try:
            assert f"pid {second.proc.pid}" in _refused(str(d))
        finally:
            second.stop()
        third = ServerProcess("--data-dir", str(d)).wait_ready()  # after a clean stop too
        third.stop()
    finally:
        first.stop()


def test_lock_held_across_processes_not_within_one(tmp_path):
    """In process: hosts of one process share the lock (counted); another process is refused."""
    from cqlstream.server.dir_lock import DataDirLock, DataDirLocked

    a = DataDirLock(tmp_path)
    b = DataDirLock(tmp_path)  # the same process: shared
    code = (
        "import sys\nfrom cqlstream.server.dir_lock import DataDirLock, DataDirLocked\n"
        "try:\n    DataDirLock(sys.argv[1])\nexcept DataDirLocked as e:\n    print(e); sys.exit(3)\n"
    )
    probe = [sys.executable, "-c", code, str(tmp_path)]
    env = {"PYTHONPATH": str(ROOT)}
    r = subprocess.run(probe, capture_output=True, text=True, timeout=30, cwd=ROOT, env=env)
    assert r.returncode == 3 and "pid" in r.stdout, r
    a.release()
    r = subprocess.run(probe, capture_output=True, text=True, timeout=30, cwd=ROOT, env=env)
    assert r.returncode == 3, r  # b still holds it
    b.release()
    r = subprocess.run(probe, capture_output=True, text=True, timeout=30, cwd=ROOT, env=env)
    assert r.returncode == 0, r
    assert DataDirLocked.__mro__[1] is OSError

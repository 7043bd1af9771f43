"""Messages through a pipe between a run and its child processes (io/reader_process.py,
io/writer_process.py): a header (`<QI`: pickle length, buffer count), the payload pickled with
protocol 5 (numpy arrays travel out of band), then each buffer (`<Q` length, bytes)."""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any

HEAD = struct.Struct("<QI")
LEN = struct.Struct("<Q")

# Bytes a pipe to or from a child holds (F_SETPIPE_SZ; Linux's default is 64 KB, and its default
# limit for an unprivileged process 1 MB): a round or a block is a few MB, which through a 64 KB
# pipe passes in as many ping-pongs between the two processes.
PIPE_BYTES = 1 << 20


def send(pipe: IO[bytes], payload: Any) -> None:
    bufs: list[pickle.PickleBuffer] = []
    meta = pickle.dumps(payload, protocol=5, buffer_callback=bufs.append)
    pipe.write(HEAD.pack(len(meta), len(bufs)) + meta)
    for b in bufs:
        raw = b.raw()
        pipe.write(LEN.pack(raw.nbytes))
        pipe.write(raw)  # a buffered pipe writes a large buffer straight through (GIL released)
    pipe.flush()


def read_exact(pipe: IO[bytes], n: int) -> bytearray | None:
    """n bytes from the pipe, or None at its end (also mid-message: the other side is gone)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = pipe.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            return None
        got += k
    return buf


def receive(pipe: IO[bytes]) -> Any | None:
    """The next message, or None at the end of the pipe."""
    head = read_exact(pipe, HEAD.size)
    if head is None:
        return None
    meta_len, nbuf = HEAD.unpack(head)
    meta = read_exact(pipe, meta_len)
    if meta is None:
        return None
    bufs = []
    for _ in range(nbuf):
        size = read_exact(pipe, LEN.size)
        data = None if size is None else read_exact(pipe, LEN.unpack(size)[0])
        if data is None:
            return None
        bufs.append(data)
    return pickle.loads(meta, buffers=bufs)


def widen(fd: int) -> None:
    """Make a pipe hold PIPE_BYTES where the system allows; else it stays as it is."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError, ValueError):  # not Linux, or above the pipe size limit
        pass


__all__ = ["HEAD", "LEN", "PIPE_BYTES", "read_exact", "receive", "send", "widen"]

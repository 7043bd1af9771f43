"""The write-ahead log: an append-only sequence of records in segment files, each record framed with
its length and a CRC32 so that a record torn by a crash is recognised and cut off on open.

A segment is `<first lsn, 20 digits>.wal`: the magic line `CQLWAL1\\n`, then records

    u32 body length | u32 CRC32 of the body | body = u32 header length | JSON header | payload

The header says what the record is (the server's records are in `server/wal_records.py`); the
payload is opaque here (pushes carry an Arrow IPC stream). A framed file rather than one Arrow
IPC stream per segment: an IPC stream has one schema, while consecutive records are pushes to
different sources, registrations and clock ticks; framing also gives every record its own CRC.

Records are numbered (log sequence numbers, from 1) in the order appended. Every append is one
`os.write` of the whole frame: once `append` returns, the record is in the operating system and
survives the process being killed; the fsync policy says when it is also on disk (survives a
machine crash): `always` before `append` returns, `interval` within `interval_ms` (a flusher
thread), `off` when the operating system writes it back.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("cqlstream.server")

MAGIC = b"CQLWAL1\n"
FRAME = struct.Struct("<II")  # body length, CRC32 of the body
HEADER_LEN = struct.Struct("<I")
SUFFIX = ".wal"
FSYNC_POLICIES = ("always", "interval", "off")
MAX_BODY = 1 << 31  # a length beyond this is garbage, not a record


class LogError(OSError):
    """The log cannot be read (a damaged record that is not the last one) or written."""


@dataclass(frozen=True)
class Record:
    lsn: int
    header: dict[str, Any]
    payload: bytes


def segment_name(first_lsn: int) -> str:
    return f"{first_lsn:020d}{SUFFIX}"


def _frame(header: dict[str, Any], payload: bytes) -> bytes:
    h = json.dumps(header, separators=(",", ":")).encode()
    body = HEADER_LEN.pack(len(h)) + h + payload
    return FRAME.pack(len(body), zlib.crc32(body)) + body


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _scan(path: Path, data: bytes | None = None) -> tuple[list[tuple[int, int]], int, bool]:
    """([(offset, body length)] of the whole records of a segment (its bytes `data`, read here when
    not given), end offset of the last whole record, whether bytes after it are torn)."""
    if data is None:
        data = path.read_bytes()
    if not data.startswith(MAGIC):
        if len(data) < len(MAGIC) and MAGIC.startswith(data):
            return [], 0, bool(data)  # crashed while creating the segment
        raise LogError(f"{path}: not a cqlstream log segment")
    out: list[tuple[int, int]] = []
    pos = len(MAGIC)
    while pos < len(data):
        if pos + FRAME.size > len(data):
            return out, pos, True
        n, crc = FRAME.unpack_from(data, pos)
        body = data[pos + FRAME.size : pos + FRAME.size + n]
        if n > MAX_BODY or len(body) < n or zlib.crc32(body) != crc:
            return out, pos, True
        out.append((pos, n))
        pos += FRAME.size + n
    return out, pos, False


class WriteAheadLog:
    """Segments under `directory`: `append` records, read them back from an LSN, roll segments at
    `segment_bytes`, drop the segments before an LSN (after a checkpoint)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: str = "interval",
        interval_ms: float = 100.0,
        segment_bytes: int = 64 << 20,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        self.dir = Path(directory)
        self.fsync = fsync
        self.interval = max(float(interval_ms), 1.0) / 1000.0
        self.segment_bytes = int(segment_bytes)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.truncated = 0  # bytes of a torn last record cut off on open
        self._io = threading.Lock()  # the file descriptor, between appends, rolls and the flusher
        self._fd: int | None = None
        self._size = 0
        self._dirty = False
        self._closed = False
        self.next_lsn = self._open()
        self._flusher: threading.Thread | None = None
        if fsync == "interval":
            self._flusher = threading.Thread(
                target=_flush_loop, args=(weakref.ref(self), self.interval), name="cqlstream-wal-fsync", daemon=True
            )
            self._flusher.start()

    # ------------------------------------------------------------ segments
    def segments(self) -> list[tuple[int, Path]]:
        """(first lsn, path) of every segment, oldest first."""
        out = []
        for p in self.dir.glob("*" + SUFFIX):
            try:
                out.append((int(p.name[: -len(SUFFIX)]), p))
            except ValueError:
                continue
        return sorted(out)

    @property
    def first_lsn(self) -> int:
        """The oldest record still in the log (== next_lsn when it is empty)."""
        segs = self.segments()
        return segs[0][0] if segs else self.next_lsn

    def _open(self) -> int:
        """Check the last segment, cut a torn last record off, and open it for appending."""
        segs = self.segments()
        if not segs:
            return 1
        first, path = segs[-1]
        records, end, torn = _scan(path)
        if torn:
            self.truncated = path.stat().st_size - end
            log.warning("log %s: a torn last record (%d bytes) was cut off", path.name, self.truncated)
            with open(path, "r+b") as f:
                if end == 0:
                    f.write(MAGIC)
                    end = len(MAGIC)
                f.truncate(end)
                f.flush()
                os.fsync(f.fileno())
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._size = max(end, len(MAGIC))
        return first + len(records)

    def _new_segment(self, first_lsn: int) -> None:
        path = self.dir / segment_name(first_lsn)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, MAGIC)
        if self.fsync != "off":
            os.fsync(fd)
            _fsync_dir(self.dir)
        if self._fd is not None:
            if self.fsync != "off":
                os.fsync(self._fd)
            os.close(self._fd)
        self._fd, self._size, self._dirty = fd, len(MAGIC), False

    def roll(self) -> None:
        """Start a new segment at the next LSN (unless the current one is still empty)."""
        with self._io:
            if self._fd is None or self._size > len(MAGIC):
                self._new_segment(self.next_lsn)

    # ------------------------------------------------------------ writing
    def append(self, header: dict[str, Any], payload: bytes = b"") -> int:
        """Append one record; returns its LSN. Raises LogError when it cannot be written."""
        frame = _frame(header, payload)
        with self._io:
            if self._closed:
                raise LogError("the log is closed")
            try:
                if self._fd is None or (self._size + len(frame) > self.segment_bytes and self._size > len(MAGIC)):
                    self._new_segment(self.next_lsn)
                view = memoryview(frame)
                while view:
                    k = os.write(self._fd, view)  # type: ignore[arg-type]  # opened just above
                    view = view[k:]
                self._size += len(frame)
                if self.fsync == "always":
                    os.fsync(self._fd)  # type: ignore[arg-type]
                else:
                    self._dirty = True
            except OSError as e:
                raise LogError(f"cannot write the log in {self.dir}: {e}") from e
            lsn = self.next_lsn
            self.next_lsn += 1
            return lsn

    def sync(self) -> None:
        """fsync what was appended (the flusher's step; also at close and before a checkpoint)."""
        with self._io:
            if self._fd is not None and self._dirty:
                os.fsync(self._fd)
                self._dirty = False

    def close(self) -> None:
        with self._io:
            if self._closed:
                return
            self._closed = True
            if self._fd is not None:
                if self.fsync != "off" or self._dirty:
                    os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None

    @property
    def closed(self) -> bool:
        return self._closed

    def __del__(self) -> None:  # a log dropped without close (a crashed host in tests): free the descriptor
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    # ------------------------------------------------------------ reading
    def records(self, from_lsn: int = 1) -> Iterator[Record]:
        """Every record with LSN ≥ from_lsn, in order (the log's segments as they are on disk)."""
        segs = self.segments()
        for k, (first, path) in enumerate(segs):
            nxt = segs[k + 1][0] if k + 1 < len(segs) else None
            if nxt is not None and nxt <= from_lsn:
                continue
            data = path.read_bytes()  # scanned as read: the last segment may grow meanwhile (archive reads)
            offsets, _, torn = _scan(path, data)
            if torn and nxt is not None:
                raise LogError(f"log segment {path.name} is damaged at record {first + len(offsets)}")
            for i, (pos, n) in enumerate(offsets):
                lsn = first + i
                if lsn < from_lsn:
                    continue
                body = data[pos + FRAME.size : pos + FRAME.size + n]
                (hn,) = HEADER_LEN.unpack_from(body)
                yield Record(
                    lsn, json.loads(body[HEADER_LEN.size : HEADER_LEN.size + hn]), body[HEADER_LEN.size + hn :]
                )

    # ------------------------------------------------------------ truncation
    def drop_before(self, lsn: int) -> int:
        """Delete the segments whose records all have LSN < lsn; returns how many."""
        segs = self.segments()
        dropped = 0
        for k, (_, path) in enumerate(segs):
            nxt = segs[k + 1][0] if k + 1 < len(segs) else None
            if nxt is not None and nxt <= lsn:
                path.unlink()
                dropped += 1
        if dropped and self.fsync != "off":
            _fsync_dir(self.dir)
        return dropped

    def bytes(self) -> int:
        """Bytes of every segment on disk."""
        return sum(p.stat().st_size for _, p in self.segments())


def _flush_loop(ref: weakref.ref[WriteAheadLog], interval: float) -> None:
    """The `interval` policy: fsync every `interval` seconds while there is something new (the
    thread ends with its log: when closed or garbage collected)."""
    while True:
        time.sleep(interval)
        wal = ref()
        if wal is None or wal.closed:
            return
        try:
            wal.sync()
        except OSError:
            log.exception("log fsync failed")
        del wal

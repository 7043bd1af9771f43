"""Files cqlstream keeps between processes in the user's cache folder, written and read safely.

Two caches use this (cql/grammar_cache.py: the parser's LALR tables; cqlstream/dataclass_code.py:
the compiled methods of dataclasses). Both hold what a process then executes (a pickle, code
objects), so a file is:

- kept in `$CQLSTREAM_CACHE_DIR`, else `$XDG_CACHE_HOME/cqlstream`, else `~/.cache/cqlstream`
  (created private, mode 0700), never beside the installed package;
- written atomically (a temporary file in the same folder, then `os.replace`), so a reader sees
  a whole file or none;
- trusted only when whole and ours: it starts with the caller's header (format and key), the
  payload's BLAKE2b-256 digest must match the one written after it, and the file and its folder must belong
  to this user and be writable by nobody else; anything else reads as absent;
- never a reason to fail: a folder that cannot be created or written only means no file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

try:  # the C module hashlib takes blake2b from; hashlib itself loads OpenSSL (~3.5 ms of every start)
    from _blake2 import blake2b as _blake2b
except ImportError:  # another Python
    from hashlib import blake2b as _blake2b


def hasher() -> Any:
    """A BLAKE2b hash with a 32-byte digest (64 hex digits): the payloads' checksum and the caches'
    keys (cryptographic like SHA-256, twice its time per MB here, but without importing hashlib)."""
    return _blake2b(digest_size=32)


def digest(data: bytes) -> str:
    """Hex digest of `data` (see `hasher`)."""
    h = hasher()
    h.update(data)
    return str(h.hexdigest())


def cache_dir() -> Path:
    """Where cached files are kept (the folder need not exist yet)."""
    explicit = os.environ.get("CQLSTREAM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cqlstream"


def private(st: os.stat_result) -> bool:
    """Ours and writable by nobody else (what another user could have planted is never loaded)."""
    uid = getattr(os, "getuid", None)
    return (uid is None or st.st_uid == uid()) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read_private(path: Path, head: bytes) -> bytes | None:
    """The payload of the file at `path` written by `write_atomic(path, head, …)`, or None when
    it is absent, foreign, group- or world-writable, damaged or has another header."""
    try:
        with open(path, "rb") as f:
            if not (private(os.fstat(f.fileno())) and private(os.stat(path.parent))):
                return None
            data = f.read()
    except OSError:
        return None
    if not data.startswith(head) or len(data) < len(head) + 65:
        return None
    sum_, payload = data[len(head) : len(head) + 64], data[len(head) + 65 :]
    if data[len(head) + 64 : len(head) + 65] != b"\n" or digest(payload).encode() != sum_:
        return None
    return payload


def write_atomic(path: Path, head: bytes, payload: bytes) -> None:
    """Write `head`, the payload's digest and the payload to `path` atomically; any failure
    leaves no file (and is not an error)."""
    import tempfile  # only to write (~5 ms of imports a reading process does without)

    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not private(os.stat(path.parent)):
            return  # a folder others can write to: keep nothing there
        data = head + digest(payload).encode() + b"\n" + payload
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:  # mkstemp: mode 0600, ours
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


__all__ = ["cache_dir", "private", "read_private", "write_atomic"]

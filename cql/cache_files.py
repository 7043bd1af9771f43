"""Files cqlstream keeps between processes in the user's cache folder, written and read safely.

Two caches use this (cql/grammar_cache.py: the parser's LALR tables; cqlstream/dataclass_code.py:
the compiled methods of dataclasses). Both hold what a process then executes (a pickle, code
objects), so a file is:

- kept in `$CQLSTREAM_CACHE_DIR`, else `$XDG_CACHE_HOME/cqlstream`, else `~/.cache/cqlstream`
  (created private, mode 0700), never beside the installed package;
- written atomically (a temporary file in the same folder, then `os.replace`), so a reader sees
  a whole file or none;
- trusted only when whole and ours: it starts with the caller's header (format and key), the
  payload's SHA-256 must match the one written after it, and the file and its folder must belong
  to this user and be writable by nobody else; anything else reads as absent;
- never a reason to fail: a folder that cannot be created or written only means no file.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


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
    digest, payload = data[len(head) : len(head) + 64], data[len(head) + 65 :]
    if data[len(head) + 64 : len(head) + 65] != b"\n" or hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    return payload


def write_atomic(path: Path, head: bytes, payload: bytes) -> None:
    """Write `head`, the payload's SHA-256 and the payload to `path` atomically; any failure
    leaves no file (and is not an error)."""
    import tempfile  # only to write (~5 ms of imports a reading process does without)

    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not private(os.stat(path.parent)):
            return  # a folder others can write to: keep nothing there
        data = head + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
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

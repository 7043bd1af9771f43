"""Checkpoint files: the whole state of the engine host at a log position, so that a restart loads
it and replays only the log after it.

`checkpoint-<lsn, 20 digits>.ckpt` holds every change of the records before `lsn`: one JSON line
(format, version, lsn, Python version) and then a pickle of the host's state (the `Dsms` object
graph: catalog, plan, operators, synopses, queues, inputs with their clocks; the engine
subscriptions of the published queries; idempotency keys; counters). The function registry is not
pickled (it holds the built-in functions as lambdas, and user functions are code): it is written as
a reference and the loading engine's registry takes its place. Written to a temporary file,
fsynced, renamed: a crash leaves the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

# The checkpoint pickles the engine's objects whole, so a release whose classes hold new state
# cannot resume from an older pickle (the objects would lack the new attributes): bump VERSION then.
# 2: admission control, join summaries and caches, synopsis joins (2026-11-28).
# 3: k-Mon column elimination (joins' kept columns, the plan's closed nodes) (2026-11-28).
FORMAT, VERSION = "cqlstream-checkpoint", 3
PREFIX, SUFFIX = "checkpoint-", ".ckpt"
_FUNCTIONS = "functions"  # the persistent id of the function registry


class CheckpointError(Exception):
    """A checkpoint that cannot be read (damaged, or written by another version of the code)."""


def checkpoint_name(lsn: int) -> str:
    return f"{PREFIX}{lsn:020d}{SUFFIX}"


def checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(lsn, path) of the checkpoints in `directory`, oldest first."""
    out = []
    for p in directory.glob(PREFIX + "*" + SUFFIX):
        try:
            out.append((int(p.name[len(PREFIX) : -len(SUFFIX)]), p))
        except ValueError:
            continue
    return sorted(out)


def remove_partial(directory: Path) -> None:
    """Delete the temporary file of a checkpoint a crash interrupted."""
    for p in directory.glob(PREFIX + "*.tmp"):
        p.unlink(missing_ok=True)


class _Pickler(pickle.Pickler):
    def __init__(self, f: Any, functions: object) -> None:
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.functions = functions

    def persistent_id(self, obj: object) -> str | None:
        return _FUNCTIONS if obj is self.functions else None


class _Unpickler(pickle.Unpickler):
    def __init__(self, f: Any, functions: object) -> None:
        super().__init__(f)
        self.functions = functions

    def persistent_load(self, pid: Any) -> object:
        if pid != _FUNCTIONS:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return self.functions


def write(directory: Path, lsn: int, state: dict[str, Any], functions: object) -> Path:
    """Write the checkpoint of `state` at `lsn` atomically; returns its path."""
    path = directory / checkpoint_name(lsn)
    tmp = path.with_suffix(".tmp")
    head = {"format": FORMAT, "version": VERSION, "lsn": lsn, "python": sys.version.split()[0]}
    try:
        with open(tmp, "wb") as f:
            f.write(json.dumps(head).encode() + b"\n")
            _Pickler(f, functions).dump(state)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def load(path: Path, functions: object) -> tuple[int, dict[str, Any]]:
    """(lsn, state) of a checkpoint; CheckpointError when it cannot be loaded."""
    try:
        with open(path, "rb") as f:
            head = json.loads(f.readline())
            if head.get("format") != FORMAT or head.get("version") != VERSION:
                raise CheckpointError(f"{path.name}: not a {FORMAT} file of version {VERSION}")
            state = _Unpickler(f, functions).load()
    except CheckpointError:
        raise
    except Exception as e:  # anything a pickle of other code can raise
        raise CheckpointError(f"{path.name} cannot be loaded: {type(e).__name__}: {e}") from e
    return int(head["lsn"]), state

"""Idempotency keys of pushes: per source, the keys already applied and the reply each push got.

A client that retries a push (after a timeout, say) with the same `Idempotency-Key` gets the first
reply back instead of applying the rows twice. With a data dir the keys are durable: a key travels
in the log record of its push (server/recovery.py), `record` is the one write, made in the same
host call as that record, and recovery refills the store by replaying the pushes (or loads it with
a checkpoint); `seen` is the one read. Each source keeps its last `capacity` keys, oldest applied
evicted first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

Reply = dict[str, Any]

KEY_HEADER = "Idempotency-Key"  # request header naming a push
REPLAYED_HEADER = "Idempotent-Replayed"  # response header of a replayed push ("true")
KEY_MAX_LENGTH = 200


class IdempotencyStore:
    """Applied idempotency keys per source (case-insensitive name), each with its push's reply.
    Not thread-safe by itself: the host calls it under its engine lock, the lock of the push."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an idempotency store keeps at least one key per source, not {capacity}")
        self.capacity = capacity
        self._keys: dict[str, OrderedDict[str, Reply]] = {}

    def seen(self, source: str, key: str) -> Reply | None:
        """The reply recorded for `key` on `source` (a copy), or None when the key was not applied."""
        keys = self._keys.get(source.lower())
        reply = None if keys is None else keys.get(key)
        return None if reply is None else dict(reply)

    def record(self, source: str, key: str, reply: Reply) -> None:
        """`key` was applied on `source` with `reply`; beyond `capacity` keys the oldest is forgotten."""
        keys = self._keys.setdefault(source.lower(), OrderedDict())
        keys[key] = dict(reply)
        keys.move_to_end(key)
        while len(keys) > self.capacity:
            keys.popitem(last=False)

    def forget(self, source: str) -> None:
        """Drop every key of `source` (it was dropped: a new source of that name starts afresh)."""
        self._keys.pop(source.lower(), None)

    def sizes(self) -> dict[str, int]:
        """Keys kept per source."""
        return {name: len(keys) for name, keys in self._keys.items()}

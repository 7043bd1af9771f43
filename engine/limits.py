"""Per-query memory limits (docs/plan-manager.md): each query's attributed memory is checked during
engine runs, after every operator call that did work; a query over its limit is suspended (its
operators released, its state `suspended` with the reason) instead of growing until the process dies.

A query's memory is attributed as in its control table (engine/control.py `attribution`): every
operator's state, queue and store it uses, split equally among the queries sharing it. The check
reads only O(1) or per-batch sizes (`state_bytes()`, `nbytes()`) of the entities of queries that
have a limit, through an index rebuilt only when the plan changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms, QueryHandle

Sizer = tuple[Callable[[], int], int]  # (the entity's bytes, how many queries share it)


@dataclass(frozen=True)
class Overrun:
    """A query found over its memory limit: what it held and its limit, in bytes."""

    query_id: int
    held: int
    limit: int

    @property
    def reason(self) -> str:
        return (
            f"memory: query {self.query_id} held {mib(self.held)} of state, over its memory_limit of "
            f"{mib(self.limit)}; raise the limit (knob memory_limit of query:{self.query_id}) and activate it again"
        )


def mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class MemoryGuard:
    """Checks the memory of every active query that has a limit (its own `memory_limit` knob, else
    the engine's `query_memory_limit`); `over` lists the queries the last check found over it."""

    def __init__(self, d: Dsms) -> None:
        self.d = d
        self.over: list[Overrun] = []
        self.checks = 0
        self._index: dict[int, list[Sizer]] | None = None
        self._shape: tuple[int, ...] = ()

    def limit_of(self, h: QueryHandle) -> int | None:
        return h.memory_limit if h.memory_limit is not None else self.d.query_memory_limit

    def invalidate(self) -> None:
        """The plan or a limit changed: rebuild the index at the next check."""
        self._index = None

    def armed(self) -> bool:
        """Whether any active query has a limit (otherwise runs pay nothing for the check)."""
        if self.d.query_memory_limit is not None:
            return any(h.active for h in self.d.queries.values())
        return any(h.active and h.memory_limit is not None for h in self.d.queries.values())

    def _plan_shape(self) -> tuple[int, ...]:
        p = self.d.plan
        return (len(p.nodes), len(p.operators), len(p.stores), len(p.window_stores), len(p.late_stores))

    def _entries(self) -> dict[int, list[Sizer]]:
        shape = self._plan_shape()
        if self._index is None or shape != self._shape:
            from cqlstream.engine.control import plan_entities

            limited = {qid for qid, h in self.d.queries.items() if h.active and self.limit_of(h) is not None}
            index: dict[int, list[Sizer]] = {qid: [] for qid in limited}
            for kind, obj, _pn, users in plan_entities(self.d).values():
                users = [u for u in users if u in self.d.queries]
                size = obj.state_bytes if kind == "operator" else obj.nbytes
                for u in users:
                    if u in index:
                        index[u].append((size, len(users)))
            self._index, self._shape = index, shape
        return self._index

    def held(self, qid: int) -> int:
        """Bytes attributed to query `qid` (0 when it has no limit: only limited queries are indexed)."""
        return int(sum(size() / n for size, n in self._entries().get(qid, ())))

    def check(self) -> bool:
        """Measure every limited query; True when one is over its limit (listed in `over`)."""
        self.checks += 1
        over = []
        for qid in self._entries():
            h = self.d.queries.get(qid)
            limit = None if h is None or not h.active else self.limit_of(h)
            if limit is None:
                continue
            held = self.held(qid)
            if held > limit:
                over.append(Overrun(qid, held, limit))
        self.over = over
        return bool(over)


__all__ = ["MemoryGuard", "Overrun"]

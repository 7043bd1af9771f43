"""The plan manager over HTTP: control tables, knobs, global plan and peek, as JSON-safe values and problem errors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from cqlstream.engine.errors import KnobError
from cqlstream.server.problems import ProblemError

if TYPE_CHECKING:
    from cqlstream.server.host import EngineHost


def plain(v: Any) -> Any:
    """A JSON-safe copy: numpy scalars as Python numbers, non-finite floats as null, tuples as lists."""
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


class Control:
    """What the plan-manager routes call, each under the host lock."""

    def __init__(self, host: EngineHost) -> None:
        self.host = host
        self.d = host.d

    def _with_subscribers(self, t: dict[str, Any]) -> dict[str, Any]:
        """A query's `subscribers` counter counts the HTTP subscribers (the engine sees one: the server's)."""
        if t.get("kind") == "query" and t.get("id", "").startswith("query:"):
            pub = self.host.fanout.pubs.get(int(t["id"][6:]))
            t["counters"]["subscribers"] = pub.live() if pub is not None else 0
        return t

    def _table(self, entity_id: str) -> dict[str, Any]:
        return self._with_subscribers(plain(self.d.control_table(entity_id)))

    def entities(self) -> list[dict[str, Any]]:
        with self.host.lock:
            return [self._with_subscribers(plain(t)) for t in self.d.control_tables()]

    def entity(self, entity_id: str) -> dict[str, Any]:
        with self.host.lock:
            return self._table(entity_id)

    def set_knobs(self, entity_id: str, knobs: dict[str, Any]) -> dict[str, Any]:
        """Set knobs in order; unknown knob names are refused before any is set, and a bad value
        stops at that knob (those before it stay set)."""
        with self.host.lock:
            known = self._table(entity_id)["knobs"]
            for k in knobs:
                if k not in known:
                    raise ProblemError(
                        422,
                        "unknown_knob",
                        f"entity '{entity_id}' has no knob '{k}' (knobs: {', '.join(sorted(known)) or 'none'})",
                        field=k,
                    )
            try:
                for k, v in knobs.items():
                    try:
                        self.d.set_knob(entity_id, k, v)
                        self.host.journal.log("knob", entity=entity_id, knob=k, value=v)
                    except (KnobError, TypeError) as e:  # the reply names the entity and the knob
                        raise KnobError(f"entity '{entity_id}' knob '{k}': {e}", field=k) from None
            finally:
                self.host.publish()  # `active` may have run the plan or ended a query's subscribers
            return self._table(entity_id)

    def plan(self, fmt: str) -> str | dict[str, Any]:
        """The global plan: text, or the graph {nodes: control tables, edges: queues}."""
        with self.host.lock:
            out = self.d.explain_plan(fmt)
            if fmt == "json":
                out = plain(out)
                out["nodes"] = [self._with_subscribers(t) for t in out["nodes"]]
            return out

    def peek(self, entity_id: str, n: int) -> dict[str, Any]:
        with self.host.lock:
            return plain(self.d.peek(entity_id, n))

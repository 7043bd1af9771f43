"""SysStream (thesis §2.4): entities publish their control-table counters on a system stream
that users query with CQL like any other stream, e.g.

    select entity, Avg(value) from SysStream [Range 10 Seconds]
    where metric = 'queue_length' group by entity

SysStream(entity, metric, value) is system-timestamped in milliseconds. It is published on
`Dsms.tick()` (at most every `interval` seconds) and only while some query reads it, so it costs
nothing otherwise. Users cannot push to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cqlstream.cql import ast, ddl
from cqlstream.cql.catalog import UNIT_MS
from cqlstream.engine.inputs import StreamInput

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms

NAME = "SysStream"
DDL = (
    f"register stream {NAME} (entity char(40), metric char(40), value float) "
    "with (timestamp = system, unit = millisecond)"
)


class SysPublisher:
    def __init__(self, dsms: Dsms, interval: float = 1.0) -> None:
        from cqlstream.cql.parser import parse_statement

        self.dsms = dsms
        self.interval = interval
        stmt = parse_statement(DDL)  # memoized (and kept by `cqlstream run`, cql/parse_cache.py)
        assert isinstance(stmt, ast.RegisterSource)
        d = ddl.register_source(dsms.catalog, stmt)
        self.input = StreamInput(d, dsms.plan.source_queue(d.plan()), dsms.ids)
        self.last: float | None = None
        self.published = 0

    @property
    def wanted(self) -> bool:
        return bool(self.input.queue.readers)

    def now_units(self) -> int:
        return int(self.dsms.clock() * 1000) // UNIT_MS[self.input.d.time_unit]

    def publish(self, force: bool = False) -> int:
        """Push one row per (entity, numeric counter), and one per event (a conjunct re-ordering:
        metric `reorder`, Operator.events); returns the number of rows."""
        now = self.dsms.clock()
        if not self.wanted or (not force and self.last is not None and now - self.last < self.interval):
            return 0
        self.last = now
        from cqlstream.engine import control

        # events since the last publish (a selection's re-orderings), then every counter
        rows = [(op.eid[:40], m, v) for op in self.dsms.plan.operators if op.eid for m, v in op.events()]
        if self.dsms.approx is not None:  # every change of a query's approximation (metric `approximation`)
            rows.extend(self.dsms.approx.take_events())
        for table in control.tables(self.dsms):
            for metric, v in table["counters"].items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    rows.append((table["id"][:40], metric[:40], float(v)))
        t = max(self.now_units(), self.input.max_ts or 0)
        if rows:
            from cqlstream.engine.batch import from_rows

            self.input.push(from_rows(rows, self.input.types, np.full(len(rows), t, np.int64)))
        self.input.heartbeat(t)
        self.published += len(rows)
        return len(rows)

    def heartbeat(self) -> None:
        t = self.now_units()
        if self.input.max_ts is None or t > self.input.max_ts:
            self.input.heartbeat(t)

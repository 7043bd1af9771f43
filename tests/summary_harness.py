"""Running a query with an operator's `summary` knobs set before data flows, and comparing
relation states instant by instant (for the containment bounds of the summary modes)."""

from __future__ import annotations

from collections import Counter

from cqlstream.engine import control
from tests.engine_harness import _merge_events, _start, net_by_instant


def op_of(d, kind: str) -> str:
    """The entity id of the one operator of that control-table type."""
    (eid,) = [t["id"] for t in control.tables(d) if t.get("type") == kind]
    return eid


def run_with_knobs(ddl: str, query: str, inputs: dict, kind: str, knobs: dict, chunk: int):
    """Engine output {t: Counter} with the knobs set on the operator of type `kind`; consecutive
    events of a source in one push, `chunk` events per scheduler run. Also returns the Dsms, the
    query handle and the operator's control table at the end."""
    d, h, sub = _start(ddl, query, False)
    op = op_of(d, kind)
    for k, v in knobs.items():
        control.set_knob(d, op, k, v)
    events = _merge_events(inputs)
    result: dict = {}

    def take():
        for t, c in net_by_instant(sub.poll()).items():
            result.setdefault(t, Counter()).update(c)

    for i in range(0, len(events), chunk):
        group = events[i : i + chunk]
        j = 0
        while j < len(group):
            k = j
            while k < len(group) and group[k][0] == group[j][0]:
                k += 1
            evs = [e for _, e in group[j:k]]
            if len(evs[0]) == 3:
                d.push(group[j][0], [e[2] for e in evs], ts=[e[0] for e in evs], signs=[e[1] for e in evs])
            else:
                d.push(group[j][0], [e[1] for e in evs], ts=[e[0] for e in evs])
            j = k
        d.run()
        take()
    d.end()
    take()
    table = control.table(d, op)
    return nonzero(result), d, h, table


def nonzero(deltas: dict[int, Counter]) -> dict[int, Counter]:
    """Net deltas per instant without zero counts (negative ones kept: deletes)."""
    out = {t: Counter({k: v for k, v in c.items() if v}) for t, c in deltas.items()}
    return {t: c for t, c in out.items() if c}


def states(deltas: dict[int, Counter], instants) -> dict[int, Counter]:
    """The relation at each of `instants` from its net deltas per instant."""
    cur: Counter = Counter()
    out = {}
    pending = sorted(deltas)
    i = 0
    for t in sorted(instants):
        while i < len(pending) and pending[i] <= t:
            cur.update(deltas[pending[i]])
            i += 1
        out[t] = +cur
    return out


def sub_bag(a: Counter, b: Counter) -> bool:
    return all(b[k] >= v for k, v in a.items())

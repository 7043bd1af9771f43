"""Helpers for plan-manager tests: feed one Dsms many queries, collect results per query, and
compare relation states / stream outputs from an instant on."""
from __future__ import annotations

from collections import Counter

from engine.dsms import Dsms
from tests.engine_harness import _merge_events, net_by_instant, run_reference


def feed(d: Dsms, events, step: int | None = None, after=None):
    """Push reference-shaped events into d in chunks of `step` events, running after each chunk;
    `after(i)` is called after chunk i (to register queries mid-flow)."""
    step = step or max(len(events), 1)
    for n, i in enumerate(range(0, len(events), step)):
        for name, ev in events[i:i + step]:
            if ev[-1] is None:
                d.heartbeat(name, ev[0])
            elif len(ev) == 3:
                d.push(name, [ev[2]], ts=[ev[0]], signs=[ev[1]])
            else:
                d.push(name, [ev[1]], ts=[ev[0]])
        d.run()
        if after is not None:
            after(n)


def collect(parts) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for p in parts:
        for t, c in net_by_instant(p).items():
            out.setdefault(t, Counter()).update(c)
    return {t: Counter({k: v for k, v in c.items() if v}) for t, c in out.items() if any(c.values())}


class Results:
    """Polls subscriptions after every chunk; `.of(qid)` is a query's net result per instant."""

    def __init__(self, d: Dsms):
        self.d = d
        self.subs = {}
        self.parts: dict[int, list] = {}

    def watch(self, qid: int, snapshot: bool = False) -> None:
        self.subs[qid] = self.d.subscribe(qid, snapshot=snapshot)
        self.parts[qid] = []

    def poll(self) -> None:
        for qid, s in self.subs.items():
            self.parts[qid].append(s.poll())

    def of(self, qid: int) -> dict[int, Counter]:
        return collect(self.parts[qid])


def run_all(ddl: str, queries: list[str], inputs: dict, step=None, **options):
    """Register every query on one Dsms, feed inputs, return ({query index: result}, dsms)."""
    d = Dsms(**options)
    d.execute(ddl)
    hs = [d.register_query(q) for q in queries]
    res = Results(d)
    for h in hs:
        res.watch(h.id)
    feed(d, _merge_events(inputs), step, after=lambda n: res.poll())
    d.end()
    res.poll()
    return {i: res.of(h.id) for i, h in enumerate(hs)}, d


def states_from(result: dict[int, Counter], start: int, stop: int) -> dict[int, Counter]:
    """Relation state (cumulative net) at every instant in [start, stop]."""
    state, out = Counter(), {}
    for t in range(min(list(result) + [start]), stop + 1):
        state.update(result.get(t, Counter()))
        if t >= start:
            out[t] = Counter({k: v for k, v in state.items() if v})
    return out


def from_instant(result: dict[int, Counter], start: int) -> dict[int, Counter]:
    return {t: c for t, c in result.items() if t >= start}


def reference(ddl: str, query: str, inputs, compat: bool = False) -> dict[int, Counter]:
    return run_reference(ddl, query, inputs, compat=compat)

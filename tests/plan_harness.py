"""Helpers for plan-manager tests: feed one Dsms many queries, collect results per query, and
compare relation states / stream outputs from an instant on."""

from __future__ import annotations

from collections import Counter

from cqlstream.engine.dsms import Dsms
from tests.engine_harness import _merge_events, feed, net_by_instant, run_reference


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


def run_all(ddl: str, queries: list[str], inputs: dict, step=None, setup=None, **options):
    """Register every query on one Dsms (then `setup(d)`, e.g. to set knobs), feed inputs,
    return ({query index: result}, dsms)."""
    d = Dsms(**options)
    d.execute(ddl)
    hs = [d.register_query(q) for q in queries]
    if setup is not None:
        setup(d)
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


def assert_exact_from(h, got: dict[int, Counter], want: dict[int, Counter]) -> None:
    """A query registered while data flowed equals the reference from its complete_from on: its
    relation state at every instant from there, or its stream elements from there."""
    cf = h.completeness()["complete_from"]
    last = max(list(want) + list(got) + [0])
    if cf is None:
        assert got == want, h.text
    elif h.kind == "relation":
        assert states_from(got, cf, last) == states_from(want, cf, last), (h.text, cf)
    else:
        assert from_instant(got, cf) == from_instant(want, cf), (h.text, cf)

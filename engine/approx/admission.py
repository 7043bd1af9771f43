"""Admission control at push time: the overload controller's first line, acting before a queue
grows instead of one look after.

When approximation is on with a queue memory limit (and the `overload_admission` knob is on), every
push (`Dsms.push_batch`: the engine's push API, the server's HTTP push, file and Spark sources)
asks whether admitting the batch would put queue memory (engine/approx/controller.py
`queue_bytes`: queues and what operators hold pending) over the limit. If it would:

1. the queries reading the pushed source step down the controller's ladder, chosen by its policy
   (the same precision-per-load rule and weights as the controller's ticks: the cheapest precision
   goes first), until the source's rate — the largest any of its readers needs — admits few
   enough rows to fit; readers with lower rates are sampled further at their own operators, as the
   controller places them (engine/approx/shedding.py). These are ordinary controller steps: they
   stay, and the controller gives precision back one step at a time when the load falls;
2. when even that does not fit (the bottom of the ladder, or queues full already), only as many
   rows of the source's sample as fit are admitted: those smallest under an independent hash of
   the arrival number.

Rows a push would have admitted before the decision and does not admit after it are *refused*:
counted per source (its control table's `refused`), per query reading the source
(`approximation.refused_rows`) and engine-wide (`approx_refused_rows`), and published on SysStream.

A decision depends on memory measured at push time, so on timing; recovery must not decide
again. `Decision` is what the write-ahead log records with the push (the controller's steps and
the cap on rows admitted), and a replayed push applies the recorded decision instead (Dsms.push_batch
`decision=`), so recovery gives the same results.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from cqlstream.engine.batch import Batch, splitmix64

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms
    from cqlstream.engine.inputs import RelationInput, StreamInput

SALT = np.uint64(0x9E3779B97F4A7C15)  # the refusal hash: independent of the source's sampling hash


def uniform(first: int, n: int, salt: np.uint64 | None = None) -> npt.NDArray[np.float64]:
    """A uniform [0, 1) number per arrival number first … first + n − 1 (a salt: another hash)."""
    k = np.arange(first, first + n, dtype=np.uint64)
    if salt is not None:
        k = k ^ salt
    return (splitmix64(k) >> np.uint64(11)).astype(np.float64) * 2.0**-53


@dataclass(frozen=True)
class Decision:
    """What admission decided for one push: the controller's ladder steps after it (None: no
    step), the most rows of the source's sample admitted on top (None: all of it) and why."""

    levels: dict[int, int] | None
    cap: int | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        levels = None if self.levels is None else {str(q): k for q, k in self.levels.items()}
        return {"levels": levels, "cap": self.cap, "reason": self.reason}

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Decision:
        lv, cap = doc.get("levels"), doc.get("cap")
        return Decision(
            None if lv is None else {int(q): int(k) for q, k in lv.items()},
            None if cap is None else int(cap),
            doc["reason"],
        )


class Admission:
    """The engine's admission control: decides per push, applies a decision, keeps the counts."""

    def __init__(self, d: Dsms) -> None:
        self.d = d
        self.refused = 0  # rows refused engine-wide
        self.by_query: Counter[int] = Counter()  # query id → rows refused on the sources it reads
        self.events: deque[tuple[str, str, float]] = deque(maxlen=1_000)  # for SysStream
        self.last: Decision | None = None  # the decision of the last push (None: admitted as it was)

    def active(self) -> bool:
        d = self.d
        c = d.overload
        return d.approx is not None and c.admission and c.queue_memory_limit is not None and not d.approx.frozen

    def admit(
        self,
        name: str,
        inp: StreamInput | RelationInput,
        batch: Batch,
        decision: Decision | None = None,
        replayed: bool = False,
    ) -> Batch:
        """The rows of `batch` (late rows dropped already) source `name` admits: those its sampling
        rate keeps (the load shedding knob, a hash of the arrival number), at most the decision's
        cap of them (the smallest under an independent hash), so a replay admits the same rows.
        Live, the decision is made here (`self.last`); `replayed`: `decision` comes from the log
        and its controller steps are applied here."""
        m = len(batch)
        self.last = None
        if not m:
            return batch
        rate_before = inp.sampling_rate
        a = self.d.approx
        if replayed:
            if decision is not None and decision.levels is not None and a is not None:
                a.set_levels(decision.levels, decision.reason)
        elif self.active() and inp.d.kind == "stream":
            decision = self._decide(name, inp, batch)
        else:
            decision = None
        self.last = decision
        rate = inp.sampling_rate
        cap = None if decision is None else decision.cap
        if rate >= 1.0 and cap is None:
            return batch
        seen = inp.offered
        inp.offered = seen + m
        u = uniform(seen, m)
        kept = u < rate
        if cap is not None and int(kept.sum()) > cap:
            kept = _smallest(kept, uniform(seen, m, SALT), cap)
        inp.shed += int(m - kept.sum())
        if decision is not None:
            refused = int(np.count_nonzero((u < rate_before) & ~kept))
            if refused:
                self.count(name, inp, refused)
        return batch if kept.all() else batch.take(kept)

    def _decide(self, name: str, inp: StreamInput | RelationInput, batch: Batch) -> Decision | None:
        """Step the source's readers down the ladder until the rows its rate admits fit under the
        limit; then cap the rows admitted at what fits. None: the push fits as it is."""
        from cqlstream.engine.approx.controller import queue_bytes

        a, c = self.d.approx, self.d.overload
        assert a is not None and c.queue_memory_limit is not None
        m = len(batch)
        limit, row = c.queue_memory_limit, batch.nbytes() / m
        # what the queues hold, and what their unread input will take again once windows read it
        held = queue_bytes(self.d) + sum(i.queue.nbytes() * (self._copies(i) - 1.0) for i in self.d.inputs.values())
        if held + m * self.row_cost(inp, row) <= limit and inp.sampling_rate >= 1.0:
            return None  # everything fits (under a rate < 1 the sample drawn decides, below)
        why = f"admission: a push of {m} rows on '{inp.d.name}' would put queue memory over the limit"
        before = dict(a.levels)
        readers = set(self.readers(name))

        def kept() -> float:
            return sum(x.rate for x in a._candidates() if x.query_id in readers)

        # the readers' rates fall until the source's sample fits, but by no more than the pressure
        # (the queues full already: this push is capped below, and precision is not thrown away
        # for input that the engine is about to work off)
        floor = kept() * limit / (held + m * self.row_cost(inp, row))
        while held + m * self.row_cost(inp, row) > limit and kept() > floor:
            # every query is a candidate (a policy keeping state sees them all); only readers move
            cands = [x if x.query_id in readers else replace(x, down=None) for x in a._candidates()]
            qid = a.policy()(cands, "degrade")
            if qid is None:
                break
            a.levels[qid] = a.levels.get(qid, 0) + 1
            a.apply(a.now(), why)
        moved = a.levels != before
        fits = int(max(limit - held, 0.0) // (self.row_cost(inp, row) / max(inp.sampling_rate, 1e-9)))
        drawn = int(np.count_nonzero(uniform(inp.offered, m) < inp.sampling_rate))
        cap = fits if drawn > fits else None
        if not moved and cap is None:
            return None
        return Decision(dict(a.levels) if moved else None, cap, why)

    def row_cost(self, inp: StreamInput | RelationInput, row: float) -> float:
        """Expected queue memory one offered row of `row` bytes takes: in the source's queue at its
        rate, and again in each operator reading that queue that holds input pending (a window
        until its slide closes), at that operator's own sampling rate."""
        return row * inp.sampling_rate * self._copies(inp)

    def _copies(self, inp: StreamInput | RelationInput) -> float:
        """1 + the sampling rates of the operators reading `inp`'s queue that hold input pending."""
        from cqlstream.engine.operators.base import Operator

        return 1.0 + sum(
            op.sampling_rate
            for op in self.d.plan.operators
            if type(op).pending_bytes is not Operator.pending_bytes and any(q is inp.queue for q in op.inputs)
        )

    def readers(self, name: str) -> list[int]:
        """Ids of the running queries reading source `name` (through their plan)."""
        from cqlstream.engine.approx import shedding  # only when rows are refused: not at every start

        q = self.d.inputs[name.lower()].queue
        return sorted(
            h.id
            for h in self.d.queries.values()
            if h.pnode is not None and any(s.queue is q for s in shedding.sources_under(h.pnode))
        )

    def count(self, name: str, inp: StreamInput | RelationInput, n: int) -> None:
        inp.refused += n
        self.refused += n
        self.events.append((f"src:{inp.d.name}"[:40], "refused", float(n)))
        for qid in self.readers(name):
            self.by_query[qid] += n

    def take_events(self) -> list[tuple[str, str, float]]:
        out = list(self.events)
        self.events.clear()
        return out


def _smallest(kept: npt.NDArray[np.bool_], v: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.bool_]:
    """`kept` narrowed to its k entries of smallest `v` (ties: the earlier)."""
    idx = np.flatnonzero(kept)
    out = np.zeros(len(kept), bool)
    if k > 0:
        out[idx[np.argsort(v[idx], kind="stable")[:k]]] = True
    return out

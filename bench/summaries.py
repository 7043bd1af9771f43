"""The summary modes of the operators on the engine: memory against error, at fixed seeds.

1. EXCEPT DISTINCT / INTERSECT DISTINCT over sliding windows with `summary` = bloom (the right
   window in a counting Bloom filter): the measured false-positive rate (left values without a
   right partner wrongly removed / wrongly kept, averaged over instants) beside the formula
   (1 − e^(−kn/m))^k for m counters and n distinct right values, and the reported estimate of
   wrong rows beside the measured count at the end.
2. A window join with `summary` = reservoir: the share of the exact join's rows produced beside
   the reported sampling fraction Π τ, and the spread of the per-instant share (its relative
   standard deviation over the instants after the first window) against the bytes.
3. approx_median / approx_p90 / approx_p99 from KLL panes over a sliding window: max and mean
   rank error against the exact window, and the bytes held beside the exact window's, per k.

    python -m bench.summaries [--quick]
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from typing import Any

import numpy as np

from cqlstream.engine import control
from cqlstream.engine.aggregates.sketch_quantile import PaneQuantiles
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.setop_summary import BITS_PER_VALUE


def _run(ddl: str, query: str, feed: dict[str, list[tuple[int, tuple]]], kind: str, knobs: dict) -> tuple:
    """The query's net deltas per instant and its operator's control table at the end."""
    d = Dsms()
    d.execute(ddl)
    h = d.register_query(query)
    sub = d.subscribe(h.id)
    (eid,) = [t["id"] for t in control.tables(d) if t.get("type") == kind]
    for k, v in knobs.items():
        control.set_knob(d, eid, k, v)
    instants = sorted({t for evs in feed.values() for t, _ in evs})
    by = {s: {} for s in feed}
    for s, evs in feed.items():
        for t, row in evs:
            by[s].setdefault(t, []).append(row)
    out: dict[int, Counter] = {}
    for i in range(0, len(instants), 50):
        for s in feed:
            rows, ts = [], []
            for t in instants[i : i + 50]:
                rows += by[s].get(t, [])
                ts += [t] * len(by[s].get(t, []))
            if rows:
                d.push(s, rows, ts=ts)
        d.run()
        _take(sub, out)
    d.end()
    _take(sub, out)
    return out, control.table(d, eid)


def _take(sub: Any, out: dict[int, Counter]) -> None:
    b = sub.poll()
    for row, t, s in zip(b.rows(), b.ts.tolist(), b.sign.tolist()):
        out.setdefault(t, Counter())[row] += s


def _states(deltas: dict[int, Counter], at: list[int]) -> dict[int, Counter]:
    cur: Counter = Counter()
    res, keys, i = {}, sorted(deltas), 0
    for t in at:
        while i < len(keys) and keys[i] <= t:
            cur.update(deltas[keys[i]])
            i += 1
        res[t] = +cur
    return res


def _window(feed: list[tuple[int, tuple]], t: int, r: int) -> set:
    return {row for ts, row in feed if t - r <= ts <= t}


def setops(quick: bool) -> None:
    instants, per, r, domain = (60, 40, 10, 4000) if quick else (150, 100, 20, 20_000)
    rng = np.random.default_rng(1)
    feed = {s: [(t, (int(x),)) for t in range(instants) for x in rng.integers(0, domain, per)] for s in ("L", "R")}
    ddl = "register stream L (a int); register stream R (a int);"
    at = list(range(2 * r, instants, 5))
    n_right = float(np.mean([len(_window(feed["R"], t, r)) for t in at]))
    print(f"\n1. set operations over counting Bloom filters ({per}/instant per side, windows of {r + 1} instants,")
    print(f"   ~{n_right:.0f} distinct right values live; measured over {len(at)} instants)")
    print(
        "| bytes | k | formula fp | except: measured fp | wrong rows at end / reported | intersect: measured fp | wrong rows at end / reported |"
    )
    print("|---|---|---|---|---|---|---|")
    queries = {
        op: f"select a from L [Range {r}] {op} select a from R [Range {r}]"
        for op in ("except distinct", "intersect distinct")
    }
    exact = {op: _states(_run(ddl, q, feed, op, {})[0], [*at, instants - 1]) for op, q in queries.items()}
    for nbytes in (2048, 4096, 8192, 16384, 32768):
        k = max(1, round(nbytes / max(1, nbytes // BITS_PER_VALUE) * math.log(2)))
        cells = [f"{nbytes:,}", str(k), f"{(1 - math.exp(-k * n_right / nbytes)) ** k:.4f}"]
        for op, q in queries.items():
            got, table = _run(ddl, q, feed, op, {"summary": "bloom", "summary_bytes": nbytes})
            sg, se = _states(got, [*at, instants - 1]), exact[op]
            rates = []
            for t in at:
                lw, rw = _window(feed["L"], t, r), _window(feed["R"], t, r)
                free = lw - rw  # left values without a partner
                wrong = (free - set(sg[t])) if op.startswith("except") else (set(sg[t]) & free)
                rates.append(len(wrong) / max(1, len(free)))
            end = instants - 1
            wrong_end = sum(((sg[end] - se[end]) + (se[end] - sg[end])).values())
            est = table["counters"]["summary_est_wrong_rows"]
            cells += [f"{np.mean(rates):.4f}", f"{wrong_end} / {est:.1f}"]
        print("| " + " | ".join(cells) + " |")


def join(quick: bool) -> None:
    instants, per, r, keys = (80, 20, 8, 20) if quick else (200, 40, 10, 40)
    rng = np.random.default_rng(2)
    feed = {
        s: [(t, (int(a), int(b))) for t in range(instants) for a, b in zip(rng.integers(0, keys, per), range(per))]
        for s in ("S", "T")
    }
    ddl = "register stream S (a int, b int); register stream T (a int, c int);"
    q = f"select S.a, S.b, T.c from S [Range {r}], T [Range {r}] where S.a = T.a"
    exact, _ = _run(ddl, q, feed, "join", {})
    # the exact state, held privately (the mode with a cap never reached: τ stays 1)
    same, table = _run(ddl, q, feed, "join", {"summary": "reservoir", "summary_bytes": 1 << 40})
    assert same == exact
    full = table["counters"]["state_bytes"]
    at = list(range(2 * r, instants))
    se = _states(exact, at)
    print(f"\n2. window join over reservoir samples ({per}/instant per side, windows of {r + 1} instants,")
    print(f"   {keys} join keys; exact state {full:,} B; over {len(at)} instants after the first windows)")
    print(
        "| summary_bytes | share of exact state | reported fraction Πτ | measured share of rows | rel. sd per instant |"
    )
    print("|---|---|---|---|---|")
    for share in (0.5, 0.25, 0.1, 0.05):
        nbytes = int(full * share)
        got, tab = _run(ddl, q, feed, "join", {"summary": "reservoir", "summary_bytes": nbytes})
        sg = _states(got, at)
        ratios = np.array([sum(sg[t].values()) / max(1, sum(se[t].values())) for t in at])
        frac = tab["counters"]["summary_sample_fraction"]
        print(
            f"| {nbytes:,} | {share:.0%} | {frac:.4f} | {ratios.mean():.4f} | {ratios.std() / max(ratios.mean(), 1e-9):.3f} |"
        )


def quantiles(quick: bool) -> None:
    n_window, steps, per = (5000, 40, 500) if quick else (50_000, 100, 2000)
    rng = np.random.default_rng(3)
    print(f"\n3. quantiles from KLL panes over a sliding window of {n_window:,} values ({steps} slides of {per};")
    print("   normal values; exact window held as float64 beside)")
    print("| k | bytes held | exact window bytes | max rank error | mean rank error | 1.7/k |")
    print("|---|---|---|---|---|---|")
    data = rng.normal(size=n_window + steps * per)
    for k in (25, 50, 100, 200, 400):
        pq = PaneQuantiles(k)
        for part in np.array_split(data[:n_window], 10):
            pq.add(part)
        errs, held = [], []
        for s in range(steps):
            lo = s * per
            pq.add(data[n_window + lo : n_window + lo + per])
            pq.remove(per)
            w = np.sort(data[lo + per : n_window + lo + per])
            for q in (0.5, 0.9, 0.99):
                x = pq.quantile(q)
                a = np.searchsorted(w, x, side="left") / len(w)
                b = np.searchsorted(w, x, side="right") / len(w)
                errs.append(max(0.0, a - q, q - b))
            held.append(pq.nbytes())
        print(
            f"| {k} | {int(np.mean(held)):,} | {n_window * 8:,} | {max(errs):.4f} | {np.mean(errs):.4f} | {1.7 / k:.4f} |"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    a = ap.parse_args(argv)
    setops(a.quick)
    join(a.quick)
    quantiles(a.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""k-Mon on Linear Road streams: join state with constraints against the same joins without them
(the paper's Table III reports 0.09–0.13 of the baseline).

    python -m bench.kmon_lr [--size small|720k|3h ...] [--columns] [--json F]

Two groups of joins over the streams of bench.linear_road's generator, `[Range 10 minutes]`
windows unless said, exact mode, results checked equal to the baseline's:

1. The paper's shape (Fig. 17), over derived relations: CurCarSeg joins LastRep
   (`Car [Partition By vid Rows 1]`, every car's last report) with CurActiveCars
   (`select distinct vid from Car [Range 30 seconds]`). DISTINCT makes vid a key of
   CurActiveCars, so the join is many-one with no declaration: a LastRep row that met its car's
   CurActiveCars row leaves memory. What stays is CurActiveCars, the cars on the road now; the
   baseline also holds a LastRep row for every car ever seen. The ratio therefore falls with the
   length of the run (cars seen grow, cars active do not): `3h` is a three-hour, one-expressway
   input, the length of a Linear Road run.
   AccSeg, the paper's query as printed (over `CarStr(cid, xpos, sid)`), joins CurCarSeg, a join
   output, with AccCars (the cars whose last 4 reports share one position, a GROUP BY on cid).
   Its top join keeps nothing of CurCarSeg in memory: AccCars' key makes it many-one, and RIDS(0)
   from CurCarSeg to AccCars is assumed (a car enters AccCars at one of its reports, the instant
   its CurCarSeg row is replaced) and holds, so each row leaves memory after the call it came in.
   Its memory is the sum over both joins, and its CPU time is the run's engine calls.
2. Joins of windows over the raw streams, with declared constraints:
   - CarSeg: each position report (lanes 1-3) joins its vehicle's entry report:
     `Pos.vid references Entry(vid)` (RIDS(0)), `unique(vid)` on Entry (many-one);
   - TripTimes: each exit report (lane 4) joins its vehicle's entry report (lane 0):
     `Exit.vid references Entry(vid)` (RIDS(0): the entry always came first), `unique(vid)` on both;
   - Balance: each balance request (type 2) joins its vehicle's entry report:
     `Req.vid references Entry(vid)`, `unique(vid)` on Entry.
   In TripTimes and Balance most of the state is entry reports of cars still on the road, whose
   exit or requests are still to come: every exact algorithm keeps them, whatever it knows.
Memory is the join's state tuples in memory, averaged over the second half of the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

import numpy as np

from bench.linear_road.gen import PRESETS, Params, traffic
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.kconstraints.attach import CONFIG_ATTR
from cqlstream.engine.kconstraints.strategy import KMonConfig
from cqlstream.engine.operators.join import JoinOp

WINDOW = "range 10 minutes"
STEP = 30  # seconds of input per engine call

QUERIES = {
    "CarSeg (≈ CurCarSeg, many-one)": (
        "register stream Entry (vid int, seg int, scd int) {e}; register stream Pos (vid int, seg int, scd int) {x}",
        f"select istream(P.vid, P.seg, E.seg) from Pos [{WINDOW}] as P, Entry [{WINDOW}] as E where P.vid = E.vid",
        ("with constraints (unique(vid))", "with constraints (vid references Entry(vid))"),
        ("Entry", "Pos"),
    ),
    "TripTimes (≈ CarExitStr, RIDS)": (
        "register stream Entry (vid int, seg int, scd int) {e}; register stream Exit (vid int, seg int, scd int) {x}",
        f"select istream(X.vid, X.scd, E.scd) from Exit [{WINDOW}] as X, Entry [{WINDOW}] as E where X.vid = E.vid",
        ("with constraints (unique(vid))", "with constraints (unique(vid), vid references Entry(vid))"),
        ("Entry", "Exit"),
    ),
    "Balance (≈ NegTollStr, RIDS)": (
        "register stream Entry (vid int, seg int, scd int) {e}; register stream Req (vid int, qid int, scd int) {x}",
        f"select istream(R.qid, E.seg) from Req [{WINDOW}] as R, Entry [{WINDOW}] as E where R.vid = E.vid",
        ("with constraints (unique(vid))", "with constraints (vid references Entry(vid))"),
        ("Entry", "Req"),
    ),
}


SIZES = {**PRESETS, "3h": Params(xways=1, minutes=180, vehicles=12_000)}  # 3h: a Linear Road run's length

# the paper's shape over derived relations: (DDL, query, streams pushed); the baseline is mode off
PAPER_SHAPES = {
    "CurCarSeg (Fig. 17: LastRep ⋈ CurActiveCars)": (
        "register stream Car (vid int, seg int, scd int)",
        "select istream(L.vid, L.seg) from Car [Partition By vid Rows 1] as L,"
        " (select distinct vid from Car [Range 30 seconds]) as A where L.vid = A.vid",
        ("Car",),
    ),
}
# Fig. 17's AccSeg as printed (CarStr(cid, xpos, sid)); CurCarSeg selects LastRep.cid, which the
# paper leaves ambiguous. Both joins: the top one reads the bottom one's output.
PAPER_SHAPES["AccSeg (Fig. 17: CurCarSeg ⋈ AccCars)"] = (
    "register stream CarStr (cid int, xpos int, sid int)",
    "select distinct sid from"
    " (select LastRep.cid, sid from CarStr [Partition By cid Rows 1] as LastRep,"
    "   (select distinct cid from CarStr [Range 30 seconds]) as CurActiveCars"
    "   where LastRep.cid = CurActiveCars.cid) as CurCarSeg,"
    " (select cid from CarStr [Partition By cid Rows 4] group by cid"
    "   having count(distinct xpos) = 1 and count(*) = 4) as AccCars"
    " where CurCarSeg.cid = AccCars.cid",
    ("CarStr",),
)
PAPER = {
    "CurCarSeg": 0.09,
    "AccSeg": 0.13,
    "TripTimes": 0.10,
    "Balance": 0.13,
    "CarSeg": 0.09,
}  # Table III (by the closest query)
PAPER_TIME = {"CurCarSeg": 0.65, "AccSeg": 0.99, "TripTimes": 0.49, "Balance": 0.62, "CarSeg": 0.65}  # Table III's time


def streams(size: str) -> dict[str, tuple[np.ndarray, list[tuple]]]:
    """Car (every position report), Entry, Exit, Req and Pos streams (ts = Scd seconds) from the
    generator's CommonInputStr."""
    c = traffic(SIZES[size]).columns
    rep = c["Type"] == 0
    out = {}
    for name, m, cols in (
        ("Car", rep, ("Vid", "Seg", "Scd")),
        ("CarStr", rep, ("Vid", "Pos", "Seg")),
        ("Entry", rep & (c["Lane"] == 0), ("Vid", "Seg", "Scd")),
        ("Exit", rep & (c["Lane"] == 4), ("Vid", "Seg", "Scd")),
        ("Req", c["Type"] == 2, ("Vid", "Qid", "Scd")),
        ("Pos", rep & (c["Lane"] > 0) & (c["Lane"] < 4), ("Vid", "Seg", "Scd")),
    ):
        idx = np.flatnonzero(m)
        out[name] = (c["Scd"][idx], list(zip(*(c[k][idx].tolist() for k in cols))))
    return out


def _state(join: JoinOp) -> int:
    """A join's state tuples in memory (its own state with k-Mon, the shared stores it reads without)."""
    return sum(len(s) for s in join.state) if join.stores is None else int(join.counters.extra["state_tuples"])


def run(
    ddl: str,
    query: str,
    names: tuple[str, ...],
    data: dict,
    mode: str = "exact",
    detect: bool = False,
    eliminate: bool = True,
    nbytes: list[tuple[int, int]] | None = None,
) -> tuple[Counter, list[list[int]], list, list[int], float]:
    """Results (with their signs: a relation's changes), state tuples in memory of each of the
    query's joins (in plan order, inputs first) after each call, their strategies, the spilled rows kept in memory for retraction after
    each call, and the CPU seconds of the run's engine calls. `eliminate`: k-Mon's column
    elimination; `nbytes` gets, after each call, the bytes of k-Mon's rows in memory (state and
    retraction tier) and in the disk store's files, over the query's joins."""
    d = Dsms()
    setattr(d, CONFIG_ATTR, KMonConfig(mode=mode, detect=detect, eliminate_columns=eliminate))
    d.execute(ddl)
    h = d.register_query(query)
    sub = d.subscribe(h.id)
    joins = [o for o in d.plan.operators if isinstance(o, JoinOp)]
    end = int(max(data[n][0].max() for n in names)) + 1
    pos = dict.fromkeys(names, 0)
    out: Counter = Counter()
    mem: list[list[int]] = []
    tier: list[int] = []
    cpu = 0.0
    for t in range(0, end + STEP, STEP):
        began = time.process_time()
        for n in names:
            ts, rows = data[n]
            j = int(np.searchsorted(ts, t))
            if j > pos[n]:
                d.push(n, rows[pos[n] : j], ts=ts[pos[n] : j])
            pos[n] = j
            d.heartbeat(n, t)
        d.run()
        b = sub.poll()
        cpu += time.process_time() - began
        out.update(zip(b.ts.tolist(), d.rows(b), b.sign.tolist()))
        mem.append([_state(j) for j in joins])
        tier.append(sum(j.kmon.counts()["tier"] for j in joins if j.kmon is not None))
        if nbytes is not None:
            sb = [j.kmon.state_bytes() for j in joins if j.kmon is not None]
            nbytes.append((sum(b["memory"] + b["tier"] for b in sb), sum(b["disk"] for b in sb)))
    return out, mem, [j.kmon for j in joins if j.kmon is not None], tier, cpu


def _row(name: str, base: tuple, got: tuple, cars: str) -> dict:
    """Mean state over the second half of the run (all the query's joins, and each), with k-Mon
    (`got`) and without (`base`), the run's CPU time, and whether the results are equal."""
    bres, bmem, _, _, bcpu = base
    kres, kmem, strats, ktier, kcpu = got
    half = len(bmem) // 2
    bj = np.mean(np.asarray(bmem[half:], float), axis=0)
    kj = np.mean(np.asarray(kmem[half:], float), axis=0)
    b, k, kt = float(bj.sum()), float(kj.sum()), float(np.mean(ktier[half:]))
    withdrawn = [w for s in strats for w in s.withdrawals] if strats else ["(not attached)"]
    paper = next((v for key, v in PAPER.items() if name.startswith(key)), None)
    ptime = next((v for key, v in PAPER_TIME.items() if name.startswith(key)), None)
    per_join = " + ".join(f"{x:.0f}/{y:.0f}" for x, y in zip(kj, bj)) if len(kj) > 1 else ""
    print(
        f"{name:<46} state {k:>8.0f} / baseline {b:>8.0f} = {k / b:.3f}  (paper Table III: {paper})"
        + (f"  [per join, inner first: {per_join}]" if per_join else "")
        + f"  +{kt:.0f} kept for retraction ({(k + kt) / b:.3f} with them)"
        f"  CPU {kcpu:.1f} s / {bcpu:.1f} s = {kcpu / bcpu:.2f} (paper: {ptime})"
        f"  exact={kres == bres}  withdrawn={withdrawn}  {cars}",
        flush=True,
    )
    return {
        "query": name,
        "baseline": b,
        "kmon": k,
        "per_join": [[float(x), float(y)] for x, y in zip(kj, bj)],
        "retraction": kt,
        "ratio": k / b if b else None,
        "paper": paper,
        "cpu": [kcpu, bcpu],
        "paper_time": ptime,
        "exact": kres == bres,
        "withdrawn": withdrawn,
    }


def columns_row(name: str, ddl: str, q: str, names: tuple[str, ...], data: dict) -> dict:
    """k-Mon's state bytes with column elimination (§3.3.2) and without: memory (state and
    retraction tier, mean over the second half) and disk (the store's files at the end)."""
    got: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
    res = {on: run(ddl, q, names, data, eliminate=on, nbytes=got[on])[0] for on in (True, False)}
    half = len(got[True]) // 2
    mem = {on: float(np.mean([m for m, _ in got[on][half:]])) for on in got}
    disk = {on: got[on][-1][1] for on in got}
    kept = [j.kmon.columns.line() for j in _joins_of(ddl, q) if j.kmon is not None and j.kmon.columns is not None]
    print(
        f"{name:<46} k-Mon state bytes, columns eliminated / kept: memory {mem[True] / 1e3:.1f} / {mem[False] / 1e3:.1f} kB"
        f" = {mem[True] / mem[False]:.3f}  disk {disk[True] / 1e3:.1f} / {disk[False] / 1e3:.1f} kB"
        f" = {disk[True] / max(disk[False], 1):.3f}  exact={res[True] == res[False]}  (paper §3.3.2: no figures)"
        + "".join(f"\n    {k}" for k in kept),
        flush=True,
    )
    return {
        "query": name,
        "memory_bytes": [mem[True], mem[False]],
        "disk_bytes": [disk[True], disk[False]],
        "exact": res[True] == res[False],
        "kept": kept,
    }


def _joins_of(ddl: str, q: str) -> list[JoinOp]:
    """The joins of a query registered on a fresh engine (for its EXPLAIN of the columns kept)."""
    d = Dsms()
    d.execute(ddl)
    d.register_query(q)
    return [o for o in d.plan.operators if isinstance(o, JoinOp)]


def table(
    size: str = "small", shapes: bool = True, windows: bool = True, only: str | None = None, columns: bool = False
) -> list[dict]:
    """One row per query: the mean state of its joins in the second half of the run with
    constraints and without. `only`: the queries whose name contains it. `columns`: also the
    state bytes with column elimination and without (the paper's shapes)."""
    data = streams(size)
    ts, rows = data["Car"]
    vid = np.array([r[0] for r in rows])
    half = ts >= ts.max() / 2
    cars = f"(cars seen {len(np.unique(vid))}, reporting in the 2nd half {len(np.unique(vid[half]))})"
    out = []
    for name, (ddl, q, names) in PAPER_SHAPES.items() if shapes else ():
        if only is None or only.lower() in name.lower():
            out.append(_row(name, run(ddl, q, names, data, "off"), run(ddl, q, names, data), cars))
            if columns:
                out[-1]["columns"] = columns_row(name, ddl, q, names, data)
    for name, (ddl, q, (ce, cx), names) in QUERIES.items() if windows else ():
        if only is None or only.lower() in name.lower():
            base = run(ddl.format(e="", x=""), q, names, data)
            out.append(_row(name, base, run(ddl.format(e=ce, x=cx), q, names, data), ""))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kmon_lr", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", action="append", choices=list(SIZES), help="input size(s) (default: small and 3h)")
    p.add_argument("--only", default=None, help="run only the queries whose name contains this (e.g. AccSeg)")
    p.add_argument(
        "--columns", action="store_true", help="also k-Mon's state bytes with column elimination and without"
    )
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    res = {}
    for size in args.size or ["small", "3h"]:
        print(f"== Linear Road input {size}: {SIZES[size]}", flush=True)
        res[size] = table(size, windows=size != "3h", only=args.only, columns=args.columns)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

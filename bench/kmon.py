"""k-Mon reproduction: join state with k-constraints against the baseline, on the synthetic
workload of Babu, Srivastava & Widom (TODS 2004) and on Linear Road streams.

    python -m bench.kmon [--children 100000] [--window 50000] [--ks 0,1000,5000,10000,20000] [--json F]
    python -m bench.kmon --columns 4 --no-memory --no-fn --lr none   # column elimination's bytes

Synthetic workload (2-way join, the paper's Fig 7(c) shape): a parent stream P(id, a) and a child
stream C(id, b); `P.a = C.id` is many-one (C.id unique), every child has on average 5 parents,
the filter `C.b < 50` passes 50%, both windows are `[Rows window]`. One generator per constraint
(distances uniform in [0, k], as in the paper); the k declared is the largest distance the
generated stream really shows (measured with the monitors' own structures), so the constraint
holds. Memory = join state tuples in memory (k-Mon) against the same join with no constraints
(baseline) and the paper's SWJ (window slots, placeholders for filtered-out tuples). SWJ is run,
not only computed: the same query with its selection written as `C.b < 50 + 0 * P.a`, which reads
both inputs and so stays above the join; the join then keeps every window slot (the filtered-out
tuple itself where SWJ keeps a placeholder: the same count) and filters the joined pairs. Time =
CPU time of the engine's calls per input tuple (process time, so other jobs on a shared machine
do not stretch it). The paper's figures are printed beside ours where it has numbers
(Table I times, §4.4/§6.4 false negatives, Table III Linear Road ratios); its memory plots have
no recoverable values, only their shape.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.kconstraints.monitors import CAAux, OARecord
from cqlstream.engine.kconstraints.strategy import KMonConfig, KMonStrategy
from cqlstream.engine.operators.join import JoinOp

MULT = 5  # parents per child (the paper's average multiplicity)
SEL = 50  # C.b < SEL passes 50% (b uniform in 0..99)
BLOCK = 4000

# Table I: per-tuple µs, k-Mon / SWJ, by k (0, 1000, 5000, 10000, 20000)
PAPER_TIME = {
    "RIDS": {0: (20, 24), 1000: (40, 26), 5000: (43, 28), 10000: (45, 28), 20000: (46, 28)},
    "CA": {0: (22, 20), 1000: (24, 21), 5000: (25, 23), 10000: (27, 23), 20000: (28, 24)},
    "OAP": {0: (21, 21), 1000: (23, 21), 5000: (24, 22), 10000: (25, 23), 20000: (27, 25)},
    "OAC": {0: (20, 18), 1000: (20, 18), 5000: (20, 18), 10000: (21, 18), 20000: (22, 18)},
}
PAPER_FN = {"RIDS": "< 2% per 4000-tuple block during k increases, ≈ 0 otherwise", "OAP": "≈ 0, one peak of 2.3%"}
PAPER_LR = {"CurCarSeg (many-one)": 0.09, "AccSeg (RIDS)": 0.13, "CarExitStr (RIDS)": 0.10, "NegTollStr (RIDS)": 0.13}


@dataclass
class Workload:
    """Two streams in one global arrival order: ts = arrival position."""

    p_ts: np.ndarray
    p_id: np.ndarray
    p_a: np.ndarray
    c_ts: np.ndarray
    c_id: np.ndarray
    c_b: np.ndarray

    @property
    def tuples(self) -> int:
        return len(self.p_ts) + len(self.c_ts)


def _order(p_key: np.ndarray, c_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global positions (ts) from sort keys of both streams."""
    keys = np.concatenate([p_key, c_key])
    pos = np.empty(len(keys), np.int64)
    pos[np.argsort(keys, kind="stable")] = np.arange(len(keys))
    return pos[: len(p_key)], pos[len(p_key) :]


def _build(rng: np.random.Generator, n: int, p_child: np.ndarray, p_slot: np.ndarray, c_slot: np.ndarray) -> Workload:
    """Child c arrives in slot c_slot[c]; a parent in slot q arrives between the children of slots
    q − 1 and q."""
    p_key = 2.0 * p_slot - 1 + 0.9 * rng.random(len(p_slot))
    c_key = 2.0 * c_slot + 0.01 * rng.random(n)
    p_ts, c_ts = _order(p_key, c_key)
    po, co = np.argsort(p_ts, kind="stable"), np.argsort(c_ts, kind="stable")
    c_id = np.arange(n, dtype=np.int64)
    return Workload(
        p_ts[po],
        np.arange(len(p_child), dtype=np.int64),
        p_child[po].astype(np.int64),
        c_ts[co],
        c_id[co],
        rng.integers(0, 100, n)[co],
    )


def gen_rids(n: int, k: int | np.ndarray, seed: int = 0) -> Workload:
    """RIDS(k) on P.a → C.id: parents arrive uniformly; each picks its child d ~ U[0, k] child
    arrivals ahead (d = 0: one of the last few children already arrived). `k` may be one value per
    child slot: k varying over time, as the parents that arrive then see it."""
    rng = np.random.default_rng(seed)
    m = n * MULT
    slot = np.sort(rng.integers(1, n, m))
    kk = np.asarray(k)[slot] if np.ndim(k) else np.full(m, int(k))
    d = np.floor(rng.random(m) * (kk + 1)).astype(np.int64)
    child = np.where(d >= 1, slot + d - 1, slot - 1 - rng.integers(0, 5, m))
    keep = (child >= 0) & (child < n)
    return _build(rng, n, child[keep], slot[keep], np.arange(n))


def gen_clustered(n: int, k: int | np.ndarray, seed: int = 0) -> Workload:
    """CA(k) / OAP(k) on P.a: each child arrives before its parents (RIDS(0)); the parents of one
    child follow it, spread over up to D ~ U[0, k] other arrivals (so their values are clustered
    and nearly ordered); `k` may be one value per child (varying over time)."""
    rng = np.random.default_rng(seed)
    m = n * MULT
    child = np.sort(rng.integers(0, n, m))
    kk = np.asarray(k) if np.ndim(k) else np.full(n, int(k))
    spread = np.floor(rng.random(n) * (kk + 1)).astype(np.int64)  # per child value
    off = np.floor(rng.random(m) * (spread[child] / (MULT + 1) + 1)).astype(np.int64)
    return _build(rng, n, child, np.minimum(child + 1 + off, n), np.arange(n))


def gen_oac(n: int, k: int, seed: int = 0) -> Workload:
    """OAC(k) on C.id: children arrive scrambled by up to ~k child arrivals; each parent comes up to
    5 child arrivals before its child's place in id order."""
    rng = np.random.default_rng(seed)
    m = n * MULT
    child = rng.integers(0, n, m)
    c_slot = np.arange(n) + rng.random(n) * (rng.integers(0, k + 1, n) + 1)
    slot = child - rng.integers(0, 6, m) + 1
    return _build(rng, n, child, np.clip(slot, 0, n), c_slot)


def measured(w: Workload, kind: str) -> int:
    """The largest distance of `kind` the workload shows: the k for which the constraint holds."""
    if kind == "CA":
        return int(CAAux().arrive(w.p_a).max(initial=0))
    if kind == "OAP":
        return int(OARecord().arrive(w.p_a).max(initial=0))
    if kind == "OAC":
        return int(OARecord().arrive(w.c_id).max(initial=0))
    # RIDS: child arrivals from each parent up to its child (0 when the child came first)
    c_pos = np.empty(len(w.c_id), np.int64)
    c_pos[w.c_id] = np.arange(len(w.c_id))
    before = np.searchsorted(w.c_ts, w.p_ts)  # children arrived before each parent
    return int(np.maximum(c_pos[w.p_a] - before + 1, 0).max(initial=0))


DECLARE = {
    "none": "",
    "plain": "",  # no declaration, but joins get k-Mon (detected constraints need `detect`)
    "RIDS": "with constraints (a references C(id) within {k})",
    "CA": "with constraints (clustered(a, {k}))",
    "OAP": "with constraints (ordered(a, {k}))",
    "OAC": "",
}
C_DECLARE = {"OAC": "with constraints (unique(id), ordered(id, {k}))"}


def ddl(kind: str, k: int, window: int, swj: bool = False, payload: int = 0) -> tuple[str, str]:
    """The streams' DDL and the query; `swj`: the selection kept above the join (the SWJ run);
    `payload`: extra int columns on each stream that the query does not read (column elimination
    drops them from k-Mon's state)."""
    extra = "".join(f", x{i} int" for i in range(payload))
    p = f"register stream P (id int, a int{extra}) {DECLARE.get(kind, '').format(k=k)}"
    c_decl = "" if kind in ("none", "plain") else C_DECLARE.get(kind, "with constraints (unique(id))")
    c = f"register stream C (id int, b int{extra}) {c_decl.format(k=k)}"
    sel = f"C.b < {SEL} + 0 * P.a" if swj else f"C.b < {SEL}"
    q = f"select istream(P.id, P.a, C.b) from P [rows {window}], C [rows {window}] where P.a = C.id and {sel}"
    return p + "; " + c, q


@dataclass
class Run:
    results: list[tuple[int, tuple]]  # (ts, row)
    mem: list[int]  # join state tuples after each chunk
    tier: list[int]  # spilled rows kept in memory for retraction (engine/kconstraints/retract.py)
    seconds: float
    strategy: KMonStrategy | None
    tuples: int
    state_bytes: list[int]  # k-Mon's rows in memory (state and retraction tier) after each chunk, bytes
    disk_bytes: list[int]  # k-Mon's disk store files after each chunk, bytes


def run(
    w: Workload,
    kind: str,
    k: int,
    window: int,
    config: KMonConfig | None = None,
    chunk: int = 2000,
    swj: bool = False,
    payload: int = 0,
) -> Run:
    d = Dsms()
    if config is not None:
        d.kconstraints = config  # type: ignore[attr-defined]
    text, q = ddl(kind, k, window, swj, payload)
    d.execute(text)
    h = d.register_query(q)
    sub = d.subscribe(h.id)
    join = next(o for o in d.plan.operators if isinstance(o, JoinOp))
    strat = join.kmon
    out: list[tuple[int, tuple]] = []
    mem: list[int] = []
    tier: list[int] = []
    sbytes: list[int] = []
    dbytes: list[int] = []
    secs = 0.0
    n = w.tuples
    pi = ci = 0
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        pj = int(np.searchsorted(w.p_ts, hi))
        cj = int(np.searchsorted(w.c_ts, hi))
        if pj > pi:
            pay = [w.p_id[pi:pj].tolist()] * payload  # values never read: any will do
            d.push("P", list(zip(w.p_id[pi:pj].tolist(), w.p_a[pi:pj].tolist(), *pay)), ts=w.p_ts[pi:pj])
        if cj > ci:
            pay = [w.c_id[ci:cj].tolist()] * payload
            d.push("C", list(zip(w.c_id[ci:cj].tolist(), w.c_b[ci:cj].tolist(), *pay)), ts=w.c_ts[ci:cj])
        d.heartbeat("P", hi - 1)
        d.heartbeat("C", hi - 1)
        pi, ci = pj, cj
        t0 = time.process_time()
        d.run()
        secs += time.process_time() - t0
        b = sub.poll()
        out.extend(zip(b.ts.tolist(), d.rows(b)))
        mem.append(sum(len(s) for s in join.state) if join.stores is None else int(join.counters.extra["state_tuples"]))
        tier.append(strat.counts()["tier"] if strat is not None else 0)
        sb = strat.state_bytes() if strat is not None else {"memory": 0, "tier": 0, "disk": 0}
        sbytes.append(sb["memory"] + sb["tier"])
        dbytes.append(sb["disk"])
    d.end()
    b = sub.poll()
    out.extend(zip(b.ts.tolist(), d.rows(b)))
    return Run(out, mem, tier, secs, strat, n, sbytes, dbytes)


def swj_entries(w: Workload, window: int, at: int) -> int:
    """The paper's SWJ synopsis after `at` arrivals: every window slot, filtered-out tuples as
    placeholders."""
    return min(int(np.searchsorted(w.p_ts, at)), window) + min(int(np.searchsorted(w.c_ts, at)), window)


def fn_blocks(exact: list[tuple[int, tuple]], approx: list[tuple[int, tuple]]) -> list[float]:
    """False negatives per 4000-tuple block (by result ts), as a share of the exact results."""
    e = Counter((t // BLOCK, r) for t, r in exact)
    a = Counter((t // BLOCK, r) for t, r in approx)
    per: dict[int, list[int]] = {}
    for (blk, r), cnt in e.items():
        miss = max(0, cnt - a.get((blk, r), 0))
        v = per.setdefault(blk, [0, 0])
        v[0] += miss
        v[1] += cnt
    return [per[b][0] / per[b][1] if per[b][1] else 0.0 for b in sorted(per)]


def k_schedule(n: int, base: int, top: int) -> np.ndarray:
    """k per child slot over time: flat, gradual increase, gradual drop, quick increase (over a
    twentieth of a phase), quick drop."""
    s = n // 6
    q = max(1, s // 20)
    parts = [
        np.full(s, base),
        np.linspace(base, top, s),
        np.linspace(top, base, s),
        np.concatenate([np.full(s - q, base), np.linspace(base, top, q)]),
        np.concatenate([np.full(s - q, top), np.linspace(top, base, q)]),
        np.full(n - 5 * s, base),
    ]
    return np.concatenate(parts).astype(np.int64)


GENERATORS = {"RIDS": gen_rids, "CA": gen_clustered, "OAP": gen_clustered, "OAC": gen_oac}


def memory_table(
    children: int, window: int, ks: list[int], chunk: int, kinds: list[str] | None = None, retraction: str = "disk"
) -> list[dict]:
    rows = []
    for kind, gen in GENERATORS.items():
        if kinds is not None and kind not in kinds:
            continue
        for k in ks:
            w = gen(children, k, seed=1)
            kd = measured(w, kind)
            base = run(w, "none", 0, window, chunk=chunk)
            km = run(w, kind, kd, window, KMonConfig(retraction=retraction), chunk=chunk)
            sw = run(w, "none", 0, window, chunk=chunk, swj=True)
            ref = Counter(base.results)
            same = ref == Counter(km.results)
            steady = slice(len(base.mem) // 2, None)  # after the windows fill
            bmem = float(np.mean(base.mem[steady]))
            kmem = float(np.mean(km.mem[steady]))
            ktier = float(np.mean(km.tier[steady]))
            swj_run = float(np.mean(sw.mem[steady]))
            swj = swj_entries(w, window, w.tuples)
            s = km.strategy
            paper = PAPER_TIME.get(kind, {}).get(k)
            rows.append(
                {
                    "kind": kind,
                    "k": k,
                    "k_declared": kd,
                    "tuples": w.tuples,
                    "baseline_tuples": bmem,
                    "kmon_tuples": kmem,
                    "ratio": kmem / bmem if bmem else None,
                    "swj_entries": swj,
                    "swj_run_tuples": swj_run,
                    "us_per_tuple_swj": 1e6 * sw.seconds / w.tuples,
                    "swj_results_equal": ref == Counter(sw.results),
                    "kmon_bytes": s.monitor_bytes() if s else 0,
                    "spilled": s.counts()["spilled"] if s else 0,
                    "retraction_tuples": ktier,
                    "store_reads": sum(st.reads for st in s.stores) if s else 0,
                    "us_per_tuple_base": 1e6 * base.seconds / w.tuples,
                    "us_per_tuple_kmon": 1e6 * km.seconds / w.tuples,
                    "paper_us": paper,
                    "results_equal": same,
                    "withdrawn": s.withdrawals if s else [],
                }
            )
            r = rows[-1]
            print(
                f"{kind:<5} k={k:<6} declared {kd:<6} state {kmem:>9.0f} / baseline {bmem:>9.0f} = {r['ratio']:.3f}"
                f"  (+{ktier:.0f} kept for retraction, {r['store_reads']} store reads)"
                f"  SWJ run {swj_run:>7.0f} (computed {swj})"
                f"  µs/tuple k-Mon {r['us_per_tuple_kmon']:.1f} / baseline {r['us_per_tuple_base']:.1f}"
                f" / SWJ {r['us_per_tuple_swj']:.1f}"
                + (f"  (paper {paper[0]}/{paper[1]})" if paper else "")
                + f"  exact={same} SWJ exact={r['swj_results_equal']}",
                flush=True,
            )
    return rows


def row_bytes(cols: int) -> int:
    """Bytes of one state row of `cols` int columns (8 each) with its ts (8), sign (1) and id (8)."""
    return 8 * cols + 17


def columns_table(children: int, window: int, kinds: list[str], payload: int, chunk: int) -> list[dict]:
    """k-Mon's state bytes with column elimination on and off (§3.3.2), on the synthetic workload
    with `payload` unread int columns on each stream: in memory (state and retraction tier, mean
    over the second half) and on disk (the store's files at the end). The query reads every column
    but the payload, so elimination should keep 2 of 2 + payload columns per row."""
    rows = []
    for kind in kinds:
        w = GENERATORS[kind](children, 1000, seed=1)
        kd = measured(w, kind)
        on = run(w, kind, kd, window, KMonConfig(), chunk=chunk, payload=payload)
        off = run(w, kind, kd, window, KMonConfig(eliminate_columns=False), chunk=chunk, payload=payload)
        steady = slice(len(on.mem) // 2, None)
        m_on, m_off = float(np.mean(on.state_bytes[steady])), float(np.mean(off.state_bytes[steady]))
        d_on, d_off = on.disk_bytes[-1], off.disk_bytes[-1]
        same = Counter(on.results) == Counter(off.results)
        expect = row_bytes(2) / row_bytes(2 + payload)
        rows.append(
            {
                "kind": kind,
                "k_declared": kd,
                "payload_columns": payload,
                "memory_bytes_on": m_on,
                "memory_bytes_off": m_off,
                "memory_ratio": m_on / m_off if m_off else None,
                "disk_bytes_on": d_on,
                "disk_bytes_off": d_off,
                "disk_ratio": d_on / d_off if d_off else None,
                "expected_row_ratio": expect,
                "state_tuples_on": float(np.mean(on.mem[steady])),
                "state_tuples_off": float(np.mean(off.mem[steady])),
                "results_equal": same,
                "us_per_tuple": [1e6 * on.seconds / w.tuples, 1e6 * off.seconds / w.tuples],
            }
        )
        r = rows[-1]
        print(
            f"{kind:<5} k={kd:<6} +{payload} unread columns: memory {m_on / 1e6:.2f} MB eliminated / {m_off / 1e6:.2f} MB kept"
            f" = {r['memory_ratio']:.3f} (rows: {row_bytes(2)}/{row_bytes(2 + payload)} = {expect:.3f})"
            f"  disk {d_on / 1e6:.2f} / {d_off / 1e6:.2f} MB = {r['disk_ratio'] or 0:.3f}"
            f"  tuples {r['state_tuples_on']:.0f} / {r['state_tuples_off']:.0f}"
            f"  µs/tuple {r['us_per_tuple'][0]:.1f} / {r['us_per_tuple'][1]:.1f}  exact={same}"
            "  (paper §3.3.2: no figures)",
            flush=True,
        )
    return rows


def fn_table(children: int, window: int, chunk: int) -> list[dict]:
    rows = []
    cases = {
        "RIDS": (
            lambda: gen_rids(children, k_schedule(children, 500, 4000), seed=2),
            KMonConfig("approx", True, 500, 1.0, 0.01),
            500,
        ),
        "OAP": (
            lambda: gen_clustered(children, k_schedule(children, 500, 4000), seed=2),
            KMonConfig("approx", True, 1000, 1.2, 0.01),
            0,
        ),
    }
    for kind, (mk, cfg, k0) in cases.items():
        w = mk()
        exact = run(w, "none", 0, window, chunk=chunk)
        approx = run(w, kind, k0, window, config=cfg, chunk=chunk)
        blocks = fn_blocks(exact.results, approx.results)
        worst = max(blocks, default=0.0)
        mean = float(np.mean(blocks)) if blocks else 0.0
        s = approx.strategy
        rows.append(
            {
                "kind": kind,
                "max_block_fn": worst,
                "mean_block_fn": mean,
                "blocks": len(blocks),
                "withdrawals": len(s.withdrawals) if s else 0,
                "paper": PAPER_FN[kind],
            }
        )
        print(
            f"{kind:<5} approximate mode: false negatives per 4000-tuple block max {100 * worst:.2f}% mean "
            f"{100 * mean:.3f}% over {len(blocks)} blocks, {rows[-1]['withdrawals']} withdrawals (paper: {PAPER_FN[kind]})",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kmon", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--children", type=int, default=100_000, help="child tuples (parents: 5x; default 100,000 → 600k tuples)"
    )
    p.add_argument("--window", type=int, default=50_000, help="[Rows N] on both streams (paper: 50,000)")
    p.add_argument("--ks", default="0,1000,5000,10000,20000", help="k values (paper: Table I's)")
    p.add_argument("--chunk", type=int, default=2000, help="arrivals per engine call")
    p.add_argument("--lr", default="small", help="Linear Road size (bench.linear_road.gen presets; 'none' skips)")
    p.add_argument("--kinds", default="RIDS,CA,OAP,OAC", help="constraint kinds of the memory table")
    p.add_argument(
        "--retraction",
        choices=("memory", "disk"),
        default="disk",
        help="spilled rows that met a live partner: on disk (default) or in memory for its delete",
    )
    p.add_argument("--no-fn", action="store_true", help="skip the approximate-mode false-negative runs")
    p.add_argument(
        "--columns",
        type=int,
        default=0,
        metavar="P",
        help="also measure column elimination: P unread int columns per stream, state bytes on/off",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the memory table (e.g. with --columns)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    ks = [int(x) for x in args.ks.split(",")]
    print(f"== synthetic workload: {args.children} children, {MULT * args.children} parents, [Rows {args.window}]")
    mem = (
        []
        if args.no_memory
        else memory_table(args.children, args.window, ks, args.chunk, args.kinds.split(","), args.retraction)
    )
    cols = []
    if args.columns:
        print(f"== column elimination (§3.3.2): {args.columns} unread int columns per stream, k-Mon state bytes")
        cols = columns_table(args.children, args.window, args.kinds.split(","), args.columns, args.chunk)
    fn = []
    if not args.no_fn:
        print("== approximate mode, k varying over time (monitors on)")
        fn = fn_table(args.children, args.window, args.chunk)
    lr = []
    if args.lr != "none":
        from bench import kmon_lr

        print(f"== Linear Road ({args.lr}): many-one + RIDS")
        lr = kmon_lr.table(args.lr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"memory": mem, "columns": cols, "false_negatives": fn, "linear_road": lr}, f, indent=1, default=str
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

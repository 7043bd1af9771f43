"""Bounded memory (Arasu, Babcock, Babu, McAlister, Widom): the paper's verdicts beside ours, the
checker's speed against the enumeration of derived LTO queries, and state size against input
length for the synopsis join and the ordinary join.

1. `table`: Table I (Q1–Q7 under π̃ and π) and the worked examples, each with the paper's answer,
   ours by the enumeration and ours by the checker (cql/boundedness/checker.py).
2. `checker`: growing queries — Q6's shape under π with m attributes per stream (every attribute
   of S below every attribute of T) and k constants — decided by each procedure: CPU seconds, the
   number of derived LTO queries (the enumeration's work; it gives up past 2,000) and the partial
   queries the checker visits.
   Then Theorem 8.6's C3 (MAX / MIN over joins): the printed theorem's answer, the corrected one
   (docs/bounded-memory.md) and ours by each procedure.
3. `memory`: bytes of state of a registered query against input length, with the synopsis join or
   synopsis aggregate (the default) and with `synopsis_joins=False` (windows, the ordinary join
   and aggregate), on input whose unbounded attributes keep taking new values.

    python -m bench.boundedness [--only table,checker,memory] [--tuples 80000] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from cqlstream.cql.boundedness import Decision, decide, lto, theorems
from cqlstream.cql.boundedness.closure import Closure
from cqlstream.cql.boundedness.from_plan import normal_form
from cqlstream.cql.boundedness.normal_form import Spj
from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.frontend import compile_query
from cqlstream.engine.dsms import Dsms

DDL = "register stream S (A int, B int, C int); register stream T (D int, E int); register stream T2 (C int)"

# (name, query, the paper's answer): Table I under π̃ and π, and the worked examples of §5.
PAPER = [
    ("Q1 π̃", "select S.A from S where S.A > 10", True),
    ("Q1 π", "select distinct S.A from S where S.A > 10", False),
    ("Q2 π̃", "select S.A from S, T where S.A = T.D", False),
    ("Q2 π", "select distinct S.A from S, T where S.A = T.D", False),
    ("Q3 π̃", "select S.A from S, T where S.A = T.D and S.A > 10 and T.D < 20", True),
    ("Q3 π", "select distinct S.A from S, T where S.A = T.D and S.A > 10 and T.D < 20", True),
    ("Q3 with (A, C)", "select S.A, S.C from S, T where S.A = T.D and S.A > 10 and T.D < 20", False),
    ("Q4 π̃", "select S.A from S, T where S.B < T.D and S.A = 10", False),
    ("Q4 π", "select distinct S.A from S, T where S.B < T.D and S.A = 10", True),
    ("Q5 π̃", "select S.A from S, T where S.B < T.D and S.C < T.E and S.A = 10", False),
    ("Q5 π", "select distinct S.A from S, T where S.B < T.D and S.C < T.E and S.A = 10", False),
    ("Q6 π̃", "select S.A from S, T where S.B < T.D and S.C < T.E and S.B < T.E and S.C < T.D and S.A = 10", False),
    (
        "Q6 π",
        "select distinct S.A from S, T where S.B < T.D and S.C < T.E and S.B < T.E and S.C < T.D and S.A = 10",
        True,
    ),
    ("Q7 π̃", "select S.A from S, T where S.B < T.D and T.D > 10 and S.B < 20 and S.A = 10", True),
    ("Q7 π", "select distinct S.A from S, T where S.B < T.D and T.D > 10 and S.B < 20 and S.A = 10", True),
    ("Ex 5.7", "select S.A from S, T2 where S.A < 20 and S.A = T2.C and T2.C > 10 and S.B > 20", True),
    ("Ex 5.8", "select S.A from S, T2 where S.A > 10 and S.B = T2.C and S.B = 10", False),
    ("Ex 5.9", "select S.A from S, T2 where S.A = 10 and S.B < T2.C and S.B > 10 and T2.C > 10", False),
    ("Ex 5.11", "select distinct S.A from S, T2 where S.A = 10 and S.B < T2.C and S.B > 10 and T2.C > 10", True),
    (
        "Ex 5.12",
        "select distinct S.A from S, T where S.A = 10 and S.B > T.D and S.C > T.E and S.B > 10 and S.C < 10 "
        "and T.D > 10 and T.E < 10",
        False,
    ),
    (
        "Ex 8.7",
        "select S.A, T2.C, sum(S.B) from S, T2 where S.A < 20 and T2.C < 20 and S.A > 10 and T2.C > 10 "
        "group by S.A, T2.C",
        True,
    ),
]


# Theorem 8.6's C3 over S(A, B, C) × T(D, E): (name, query, the printed theorem's answer, the
# answer once MAX needs MinRef(S) empty (MIN: MaxRef(S)), which the printed statement omits).
THEOREM_8_6 = [
    ("MAX(B), B > D", "select max(S.B) from S, T where S.B > T.D", True, True),  # MaxRef(S) = {B}
    ("MAX(C), B > D", "select max(S.C) from S, T where S.B > T.D", False, False),  # MaxRef(S) = {B}, not C's
    ("MAX(C), B = C > D", "select max(S.C) from S, T where S.B > T.D and S.B = S.C", True, True),
    ("MIN(D), B > D", "select min(T.D) from S, T where S.B > T.D", True, True),  # MinRef(T) = {D}
    ("MAX(A), B = D", "select max(S.A) from S, T where S.B = T.D and S.B > 0 and T.D < 9", True, True),
    ("MAX(C), C>E, MIN(E)", "select max(S.C), min(T.E) from S, T where S.C > T.E", True, True),
    ("MAX(B),C>E,B>D (C1)", "select max(S.B) from S, T where S.B > T.D and S.C > T.E", False, False),
    # MaxRef(S) empty, but MinRef(S) = {B}: the smallest B above the smallest D is a successor
    # search over every B seen (and the largest A with B below the largest D likewise)
    ("MIN(B), B > D", "select min(S.B) from S, T where S.B > T.D", True, False),
    ("MAX(B), B < D", "select max(S.B) from S, T where S.B < T.D", True, False),
    ("MAX(A), B < D", "select max(S.A) from S, T where S.B < T.D", True, False),
]


def _word(v: object) -> str:
    return {True: "yes", False: "no"}.get(v, str(v))  # type: ignore[call-overload]


def table() -> list[dict[str, Any]]:
    cat = catalog_from_ddl(DDL)
    rows = []
    print("Table I and the worked examples: bounded-memory computable?")
    print(f"{'query':<16} {'paper':>6} {'enumeration':>12} {'checker':>8}  rule")
    for name, q, paper in PAPER:
        plan = compile_query(q, cat).plan
        got = {}
        for m in (theorems.ENUMERATION, theorems.CHECKER):
            with theorems.using(m):
                d = decide(plan)
            got[m] = d.bounded if isinstance(d, Decision) else "outside"
            rule = d.rule if isinstance(d, Decision) else d.reason
        print(f"{name:<16} {_word(paper):>6} {_word(got['enumeration']):>12} {_word(got['checker']):>8}  {rule}")
        rows.append({"query": name, "paper": paper, **got, "rule": rule})
    agree = sum(r["paper"] == r["enumeration"] == r["checker"] for r in rows)
    print(f"agree with the paper: {agree}/{len(rows)}\n")
    print("Theorem 8.6, C3 (MAX / MIN of an unbounded attribute over a join): the printed theorem's answer,")
    print("the answer with MinRef(S) (MaxRef(S) for MIN) required empty, ours by each procedure")
    print(f"{'query':<20} {'printed':>8} {'corrected':>10} {'enumeration':>12} {'checker':>8}  rule")
    for name, q, printed, corrected in THEOREM_8_6:
        plan = compile_query(q, cat).plan
        got = {}
        for m in (theorems.ENUMERATION, theorems.CHECKER):
            with theorems.using(m):
                d = decide(plan)
            got[m] = d.bounded if isinstance(d, Decision) else "outside"
            rule = d.rule if isinstance(d, Decision) else d.reason
        print(
            f"{name:<20} {_word(printed):>8} {_word(corrected):>10} {_word(got['enumeration']):>12} "
            f"{_word(got['checker']):>8}  {rule}"
        )
        rows.append({"query": name, "paper": printed, "corrected": corrected, **got, "rule": rule})
    print()
    return rows


def _growing(m: int, k: int) -> tuple[str, str]:
    """(DDL, query): Q6's shape under π with m attributes per stream and k constants."""
    s = ", ".join(f"s{i} int" for i in range(m + 1))
    t = ", ".join(f"t{i} int" for i in range(m))
    ddl = f"register stream S ({s}); register stream T ({t})"
    atoms = [f"S.s{i + 1} < T.t{j}" for i in range(m) for j in range(m)] + ["S.s0 = 10"]
    atoms += [f"T.t0 > {10 * (i + 2)}" for i in range(k)]
    return ddl, "select distinct S.s0 from S, T where " + " and ".join(atoms)


def checker(budget: float = 20.0) -> list[dict[str, Any]]:
    rows = []
    print("Checker vs enumeration on growing queries (Q6's shape under π, all answers: bounded)")
    print(
        f"{'m':>2} {'k':>2} {'LTO queries':>12} {'enum CPU s':>11} {'enum says':>10} {'checker CPU s':>14} {'visited':>8}"
    )
    for m, k in [(2, 0), (2, 2), (3, 0), (2, 4), (3, 2), (4, 0), (3, 4), (4, 2), (5, 0), (4, 4), (6, 0)]:
        ddl, q = _growing(m, k)
        plan = compile_query(q, catalog_from_ddl(ddl)).plan
        nf = normal_form(plan)
        assert isinstance(nf, Spj)
        c = Closure.of(nf.n_attrs, list(nf.atoms))
        assert c is not None
        n_lto: int | str = 0
        t0 = time.process_time()
        for _ in lto.derived(nf, c, limit=10**9):
            n_lto = int(n_lto) + 1
            if time.process_time() - t0 > budget:
                n_lto = f">{n_lto}"
                break
        out = {}
        for meth in (theorems.ENUMERATION, theorems.CHECKER):
            visited = [0]
            spend = lto.Budget.spend

            def counting(self: lto.Budget, spend=spend, visited=visited) -> None:  # type: ignore[no-untyped-def]
                visited[0] += 1
                spend(self)

            lto.Budget.spend = counting  # type: ignore[method-assign]
            try:
                t0 = time.process_time()
                with theorems.using(meth):
                    d = decide(plan)
                out[meth] = (time.process_time() - t0, d.bounded if isinstance(d, Decision) else "gives up", visited[0])
            finally:
                lto.Budget.spend = spend  # type: ignore[method-assign]
        e, ch = out[theorems.ENUMERATION], out[theorems.CHECKER]
        print(f"{m:>2} {k:>2} {n_lto!s:>12} {e[0]:>11.3f} {_word(e[1]):>10} {ch[0]:>14.3f} {ch[2]:>8}")
        rows.append(
            {
                "m": m,
                "k": k,
                "lto": n_lto,
                "enum_s": e[0],
                "enum": e[1],
                "checker_s": ch[0],
                "checker": ch[1],
                "visited": ch[2],
            }
        )
    print()
    return rows


def _generated(rng: np.random.Generator, n: int, step: int, arity: int) -> list[tuple[int, ...]]:
    rows = rng.integers(0, 30, (n, arity))
    wide = rng.random((n, arity)) < 0.5
    rows = np.where(wide, rows + step * 1000 * rng.choice([-1, 1], (n, arity)), rows)
    return [tuple(int(x) for x in r) for r in rows]


MEMORY_QUERIES = [
    ("Q7 π̃", "select S.A from S, T where S.B < T.D and T.D > 10 and S.B < 20 and S.A = 10"),
    ("Q4 π", "select distinct S.A from S, T where S.B < T.D and S.A = 10"),
    ("Q3 π̃", "select S.A from S, T where S.A = T.D and S.A > 10 and T.D < 20"),
    # §8.2: aggregates over bounded joins, partial aggregates per bucket (the synopsis aggregate);
    # Example 8.7's cross product of the groups is left out: its ordinary plan joins every pair
    (
        "Q3 agg",
        "select S.A, count(*), sum(T.E), max(T.E) from S, T where S.A = T.D and S.A > 10 and T.D < 20 group by S.A",
    ),
    (
        "Q7 agg",
        "select count(*), sum(S.C), avg(S.C), max(S.C) from S, T where S.B < T.D and T.D > 10 and S.B < 20 and S.A = 10",
    ),
    # MAX / MIN bounded only through extreme tuples: representatives per bucket (MaxRef(S) is B's
    # class, MinRef(T) D's); the filters keep the ordinary plan's join result small enough to run
    ("ext agg", "select max(S.B), min(T.D) from S, T where S.B > T.D and S.A = 10 and T.E = 10"),
]


def memory(tuples: int) -> list[dict[str, Any]]:
    rows = []
    marks = [tuples // 8, tuples // 4, tuples // 2, tuples]
    per = 1000  # tuples per stream per instant
    print(f"State of a registered query (bytes) against input length ({per} tuples per stream per instant)")
    print(f"{'query':<7} {'plan':<16} " + " ".join(f"{m:>10,}" for m in marks) + "  (tuples per stream)")
    for name, q in MEMORY_QUERIES:
        for sj in (True, False):
            d = Dsms(synopsis_joins=sj)
            d.execute(DDL)
            h = d.register_query(q)
            sub = d.subscribe(h.id)
            rng = np.random.default_rng(1)
            sizes, t0 = [], time.process_time()
            for step in range(tuples // per):
                for stream, arity in (("S", 3), ("T", 2)):
                    d.push(stream, _generated(rng, per, step, arity), ts=[step] * per)
                d.run()
                sub.poll()
                if (step + 1) * per in marks:
                    sizes.append(d.control_table(f"query:{h.id}")["counters"]["memory_bytes"])
            cpu = time.process_time() - t0
            label = (
                ("synopsis join" if sj else "ordinary join")
                if "agg" not in name and "8.7" not in name
                else ("synopsis agg." if sj else "ordinary agg.")
            )
            print(f"{name:<7} {label:<16} " + " ".join(f"{s:>10,}" for s in sizes) + f"  ({cpu:.1f} CPU s)")
            rows.append({"query": name, "plan": label, "tuples": marks, "bytes": sizes, "cpu_s": cpu})
    print()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="table,checker,memory")
    ap.add_argument("--tuples", type=int, default=80_000, help="tuples per stream in the memory part")
    ap.add_argument("--budget", type=float, default=20.0, help="CPU seconds to count one query's LTO queries")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    parts = a.only.split(",")
    report: dict[str, Any] = {}
    if "table" in parts:
        report["table"] = table()
    if "checker" in parts:
        report["checker"] = checker(a.budget)
    if "memory" in parts:
        report["memory"] = memory(a.tuples)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

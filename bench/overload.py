"""Bursty input under the overload controller: three windowed aggregates of weights 1, 2 and 4 over
one stream, fed `--factor` (5) times the rate the engine sustains for `--seconds` (30).

Time is the process's CPU time (plus idle time skipped while no input is due), so other processes
sharing the cores do not change the figures much. Steps:

1. calibrate: the rate R (tuples per CPU second) the engine sustains on the three queries;
2. `controlled`: arrivals at factor × R, the controller on (queue memory limit `--limit`) with
   admission control at push time (`--admission`), the engine run in slices of `--budget` tuples
   per operator between controller ticks;
3. `exact`: the same arrivals with the controller off (what the queue and the latency become);
   its results are the exact answers.

Reported per run: peak queue bytes and RSS, latency (an instant's last arrival → its result)
p50/p99/max; per query: the controlled run's sampling rates over time, and the relative error of
its group averages against the exact run (a group missing from the controlled answer counts 1).

Queue bytes are measured as the controller does (engine/approx/controller.py `queue_bytes`): the
queues and what operators hold pending (a window's elements until its slide closes).

    python -m bench.overload [--seconds 30] [--factor 5] [--limit 8M] [--admission on|off]
                             [--policy weighted|uniform|allocator] [--quick] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from cqlstream.engine.approx.config import OverloadConfig
from cqlstream.engine.approx.controller import queue_bytes
from cqlstream.engine.batch import Batch
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.scheduler import RoundRobin

DDL = "register stream S (k int, v float) with (unit = millisecond)"
QUERY = "select k, Avg(v) from S [Range 100 Milliseconds Slide 100 Milliseconds] group by k"
WEIGHTS = (1.0, 2.0, 4.0)
KEYS = 2000


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _engine(overload: OverloadConfig | None, budget: int | None) -> tuple[Dsms, list]:
    d = Dsms(sys_stream=False, scheduler=RoundRobin(budget), overload=overload)
    d.execute(DDL)
    hs = [d.register_query(QUERY, weight=w, share=False) for w in WEIGHTS]
    return d, [d.subscribe(h.id) for h in hs]


BLOCK = 1 << 16


class Arrivals:
    """n tuples arriving at `rate` per second (ts = arrival in ms), generated block by block from
    a seed so that every run sees the same input without holding all of it."""

    def __init__(self, n: int, rate: float, seed: int = 11) -> None:
        self.n, self.rate, self.seed = n, rate, seed
        self._cache: tuple[int, np.ndarray, np.ndarray] | None = None

    def due(self, now: float) -> int:
        """How many have arrived by clock second `now`."""
        return min(self.n, int(np.floor(now * self.rate)) + 1) if now >= 0 else 0

    def at(self, i: int) -> float:
        return i / self.rate

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        if self._cache is None or self._cache[0] != b:
            rng = np.random.default_rng([self.seed, b])
            self._cache = (b, rng.integers(0, KEYS, BLOCK), rng.normal(100.0, 30.0, BLOCK))
        return self._cache[1], self._cache[2]

    def batch(self, i: int, j: int) -> Batch:
        ks, vs = [], []
        for b in range(i // BLOCK, (j - 1) // BLOCK + 1):
            lo, hi = max(i, b * BLOCK) - b * BLOCK, min(j, (b + 1) * BLOCK) - b * BLOCK
            k, v = self._block(b)
            ks.append(k[lo:hi])
            vs.append(v[lo:hi])
        at = np.arange(i, j, dtype=np.float64) / self.rate
        return _batch(np.concatenate(ks), np.concatenate(vs), at)


def _batch(k: np.ndarray, v: np.ndarray, at: np.ndarray) -> Batch:
    m = len(k)
    return Batch([k, v], [None, None], (at * 1000).astype(np.int64), np.ones(m, np.int8), np.zeros(m, np.uint64))


def calibrate(seconds: float, arrivals: float) -> float:
    """Tuples per CPU second the engine works off over the three queries (as `exact` does), for
    `seconds` of input arriving at `arrivals` per second (the windows' contents depend on it)."""
    src = Arrivals(int(seconds * arrivals), arrivals, seed=3)
    return src.n / exact(src).cpu_seconds


@dataclass
class Run:
    name: str
    cpu_seconds: float = 0.0
    end: float = 0.0  # the clock when the run ended
    peak_queue: int = 0
    queue: list[tuple[float, int]] = field(default_factory=list)  # (clock, queue bytes) per turn
    peak_rss: int = 0
    latency: list[float] = field(default_factory=list)
    results: list[dict[tuple[int, int], float]] = field(default_factory=list)
    rates: list[list[tuple[float, float]]] = field(default_factory=list)  # per query: (time, rate)


class CpuClock:
    """Seconds of this process's CPU since start, plus idle time skipped (no input due)."""

    def __init__(self) -> None:
        self.start = time.process_time()
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.process_time() - self.start + self.skipped


def feed(name: str, src: Arrivals, overload: OverloadConfig | None, budget: int, upto: int | None = None) -> Run:
    """Arrivals become due at their time on the CPU clock; each turn pushes what is due, runs one
    pass of the scheduler (`budget` tuples per operator) and ticks the controller. `upto`: only
    the first so many arrivals."""
    clock = CpuClock()
    d, subs = _engine(overload, budget)
    if d.approx is not None:
        d.approx.clock = clock
    run = Run(name, results=[{} for _ in subs], rates=[[(0.0, 1.0)] for _ in subs])
    i, n = 0, src.n if upto is None else min(upto, src.n)
    rss_every, pushed_at = 0, 0.0
    while True:
        now = clock()
        j = min(src.due(now), n)
        # what is due goes in as one push, at least `budget` tuples or 10 ms of arrivals
        if j > i and (j - i >= budget or now - pushed_at >= 0.01 or j == n):
            d.push_batch("S", src.batch(i, j))
            i, pushed_at = j, now
        done = d.run(max_passes=1) == 0
        if d.approx is not None:
            d.approx.tick()
            for qi, h in enumerate(d.queries.values()):
                r = (d.approx.of(h.id) or {"sampling_rate": 1.0})["sampling_rate"]
                if r != run.rates[qi][-1][1]:
                    run.rates[qi].append((clock(), r))
        _collect(subs, run, clock())
        qb = queue_bytes(d)  # queues and what operators hold pending: what the limit is on
        run.peak_queue = max(run.peak_queue, qb)
        run.queue.append((clock(), qb))
        rss_every += 1
        if rss_every % 64 == 0:
            run.peak_rss = max(run.peak_rss, _rss())
        if done and i < n:  # idle: skip to the next arrival (and push it)
            clock.skipped += max(src.at(i) - clock(), 0.0)
            pushed_at = -1.0
        elif done and i >= n:
            break
    d.end()
    _collect(subs, run, clock())
    run.end = clock()
    run.cpu_seconds = run.end - clock.skipped
    run.peak_rss = max(run.peak_rss, _rss())
    return run


def exact(src: Arrivals, chunk: int = 50_000) -> Run:
    """The exact answers: every arrival, worked off chunk by chunk with no clock."""
    t = time.process_time()
    d, subs = _engine(None, None)
    run = Run("exact", results=[{} for _ in subs])
    for i in range(0, src.n, chunk):
        d.push_batch("S", src.batch(i, min(i + chunk, src.n)))
        d.run()
        _collect(subs, run, 0.0)
    d.end()
    _collect(subs, run, 0.0)
    run.cpu_seconds = time.process_time() - t
    run.latency = []
    return run


def _collect(subs: list, run: Run, now: float) -> None:
    """Each query's new group averages, keyed by (instant, key); the latency of every new instant
    (its window closed at ts ms: the last tuple of it arrived then)."""
    instants: set[int] = set()
    for qi, s in enumerate(subs):
        b = s.poll()
        if not len(b):
            continue
        ins = b.sign > 0
        ts, key, avg = b.ts[ins], b.cols[0][ins], b.cols[1][ins]
        run.results[qi].update(zip(zip(ts.tolist(), key.tolist()), avg.tolist()))
        instants.update(np.unique(b.ts).tolist())
    run.latency.extend(now - t / 1000.0 for t in sorted(instants))


def rel_error(got: dict[tuple[int, int], float], want: dict[tuple[int, int], float]) -> float:
    """Mean relative error of the group averages (missing group: 1.0)."""
    if not want:
        return 0.0
    errs = [abs(got[g] - x) / abs(x) if g in got else 1.0 for g, x in want.items()]
    return float(np.mean(np.minimum(errs, 1.0)))


def mean_rate(points: list[tuple[float, float]], end: float) -> float:
    """The time-weighted mean of a step function of rates."""
    tot = 0.0
    for (t0, r), (t1, _) in zip(points, points[1:] + [(end, 0.0)]):
        tot += r * max(t1 - t0, 0.0)
    return tot / end if end > 0 else 1.0


def over_limit(samples: list[tuple[float, int]], limit: int) -> tuple[float, float]:
    """(seconds the queue was over `limit`, the last second it was): a step function of samples."""
    over, last = 0.0, 0.0
    for (t0, b), (t1, _) in pairwise(samples):
        if b > limit:
            over += t1 - t0
            last = t1
    return over, last


def _pct(xs: list[float], p: float) -> float:
    return float(np.percentile(xs, p)) if xs else float("nan")


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.overload", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=30.0, help="seconds of bursty input (default 30)")
    p.add_argument("--factor", type=float, default=5.0, help="input rate as a multiple of the sustained rate")
    p.add_argument("--limit", default="8M", help="the controller's queue memory limit (default 8M)")
    p.add_argument("--budget", type=int, default=20_000, help="tuples per operator call (default 20000)")
    p.add_argument(
        "--uncontrolled-seconds",
        type=float,
        default=5.0,
        help="seconds of the same input fed with the controller off, to show the queue and latency grow (default 5)",
    )
    p.add_argument(
        "--admission",
        choices=["on", "off"],
        default="on",
        help="admission control at push time (default on; off: the controller's ticks alone)",
    )
    p.add_argument("--policy", default="weighted", help="overload policy: weighted (default), uniform or allocator")
    p.add_argument("--quick", action="store_true", help="a smoke run: 3 s of input, a short calibration")
    p.add_argument("--json", default=None, help="write the figures here too")
    args = p.parse_args(argv)
    seconds = 3.0 if args.quick else args.seconds
    limit = _size(args.limit)
    # the sustained rate depends on the arrival rate (window contents): measured once at a guess,
    # then again at factor times the first answer
    rate = calibrate(0.5, 200_000.0)
    rate = calibrate(0.5 if args.quick else 2.0, rate * args.factor)
    src = Arrivals(int(rate * args.factor * seconds), rate * args.factor)
    out(
        f"sustained rate: {rate:,.0f} tuples/CPU s over {len(WEIGHTS)} queries; feeding {args.factor:g}x = "
        f"{src.rate:,.0f}/s for {seconds:g} s ({src.n:,} tuples)"
    )
    cfg = OverloadConfig(
        enabled=True,
        queue_memory_limit=limit,
        interval=0.02,
        settle=1,
        calm=10,
        admission=args.admission == "on",
        policy=args.policy,
    )
    ctl = feed("controlled", src, cfg, args.budget)
    unc_s = min(args.uncontrolled_seconds, seconds)
    unc = feed(f"off ({unc_s:g} s)", src, None, args.budget, upto=int(src.rate * unc_s))
    ex = exact(src)
    report: dict = {"rate": rate, "factor": args.factor, "seconds": seconds, "tuples": src.n, "limit": limit}
    report["admission"], report["policy"] = args.admission, args.policy
    report["exact_cpu_seconds"] = ex.cpu_seconds
    report["runs"] = {}
    out("")
    out(
        f"{'run':<12} {'cpu s':>7} {'queue p50':>10} {'queue p99':>10} {'peak queue':>11} {'peak RSS':>10} "
        f"{'lat p50':>8} {'lat p99':>8} {'lat max':>8}"
    )
    for r in (ctl, unc):
        qs = [float(b) for _, b in r.queue]
        fig = {
            "cpu_seconds": r.cpu_seconds,
            "queue_p50_bytes": _pct(qs, 50),
            "queue_p99_bytes": _pct(qs, 99),
            "peak_queue_bytes": r.peak_queue,
            "peak_rss_bytes": r.peak_rss,
            "latency_p50": _pct(r.latency, 50),
            "latency_p99": _pct(r.latency, 99),
            "latency_max": max(r.latency, default=float("nan")),
        }
        report["runs"][r.name] = fig
        out(
            f"{r.name:<12} {r.cpu_seconds:7.1f} {_mib(fig['queue_p50_bytes']):>10} {_mib(fig['queue_p99_bytes']):>10} "
            f"{_mib(r.peak_queue):>11} {_mib(r.peak_rss):>10} "
            f"{fig['latency_p50']:7.2f}s {fig['latency_p99']:7.2f}s {fig['latency_max']:7.2f}s"
        )
    out(f"exact answers (no clock): {ex.cpu_seconds:.1f} CPU s")
    out("")
    out(f"{'query':<6} {'weight':>6} {'mean rate':>9} {'min rate':>8} {'rel. error':>10} {'groups':>8}")
    report["queries"] = []
    for qi, w in enumerate(WEIGHTS):
        err = rel_error(ctl.results[qi], ex.results[qi])
        mr = mean_rate(ctl.rates[qi], ctl.end)
        lo = min(r for _, r in ctl.rates[qi])
        report["queries"].append({"weight": w, "mean_rate": mr, "min_rate": lo, "rel_error": err})
        out(f"{qi + 1:<6} {w:6g} {mr:9.3f} {lo:8.3f} {err:10.4f} {len(ex.results[qi]):8,}")
    out("")
    over, last = over_limit(ctl.queue, limit)
    report["controlled_over_limit_seconds"], report["controlled_last_over_limit"] = over, last
    out(
        f"controlled: queue over the {_mib(limit)} limit for {over:.2f} s of {ctl.end:.1f} s "
        f"(last at {last:.2f} s); peak {_mib(ctl.peak_queue)}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()
    sys.exit(0)

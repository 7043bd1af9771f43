"""Seeded Linear Road-style input for STREAM's Linear Road script, in STREAM's source format.

Four files, named as the script's `source :` lines name them (so `cqlstream run --source-dir`
finds them): `xway` (CommonInputStr), `minstr` (MinStr), `minendstr` (MinEndStr) and `minsegstr`
(MinSegStr). Timestamps are seconds, the time unit of a script's streams. MinStr has `Mnt` = m
at second 60m, MinEndStr `Mnt` = m at 60m + 59 (the end of minute m), MinSegStr a tuple per
minute, expressway, direction and segment at the minute's start.

The traffic is our own simulation, in the shape of the Linear Road benchmark (Arasu et al., VLDB
2004), not its generator: each vehicle enters an expressway on lane 0, reports every 30 s on
lanes 1-3 and exits on lane 4; Seg is 0..99 and Pos the feet from the west end (Seg*5280 + offset);
eastbound (Dir 0) positions grow, westbound ones shrink. The simulation advances in 30-second
ticks, every vehicle reporting at its own second of the tick. A vehicle's speed falls with the
number of vehicles in its segment (free flow 55-75 mph, down to 5 mph), and entries are denser
near a few ramps in waves every 12 minutes, so some segment-minutes hold more than 50 vehicles at
an average under 40 mph (the script's toll condition). Accidents: two vehicles stop at the same position for several
consecutive reports. Vehicles also send balance requests (Type 2, a Qid) and daily-expenditure
requests (Type 3) between their reports, with -1 in the fields a request does not use.

    python -m bench.linear_road.gen --out DIR [--tuples 720k] [--xways X --minutes M --vehicles V] [--seed 1]

Everything is numpy over whole columns; the same arguments always give the same bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

SEGMENTS = 100
SEG_FEET = 5280
TICK = 30  # seconds between two reports of a vehicle
FEET_PER_MPH = 44  # feet covered in one tick at 1 mph (5280 / 120)
JAM = 135  # vehicles in one segment (one xway, one direction) at which speed bottoms out
MIN_SPEED = 5
RUSH_TICKS = 24  # a rush wave every 12 minutes
BUSY = 0.8
REQUEST_RATE = 0.02  # balance requests per position report
DAILY_RATE = 0.005  # daily-expenditure requests per position report
COLUMNS = (
    "Type",
    "Scd",
    "Vid",
    "Speed",
    "XWay",
    "Lane",
    "Dir",
    "Seg",
    "Pos",
    "Qid",
    "Sinit",
    "Send",
    "Dow",
    "Tod",
    "Dy",
)
FILES = ("xway", "minstr", "minendstr", "minsegstr")


@dataclass(frozen=True)
class Params:
    """One input: `xways` expressways for `minutes` minutes, `vehicles` trips per expressway;
    `segments` per expressway (Linear Road's 100) and `directions` (2; 1: eastbound only): a short
    one-way road packs congestion into a few tuples, for inputs small enough for the reference
    evaluator."""

    xways: int
    minutes: int
    vehicles: int
    seed: int = 1
    segments: int = SEGMENTS
    directions: int = 2
    requests: float = REQUEST_RATE  # balance requests per position report

    @property
    def road_feet(self) -> int:
        return self.segments * SEG_FEET


# Named sizes: 720k and 3M are about as many tuples as they say (all four files together; the
# traffic is chaotic enough that nearby vehicle counts can give 10% more or less).
PRESETS: dict[str, Params] = {
    # for the reference evaluator (tests/test_linear_road_differential.py): a 4-minute, 8-segment
    # one-way road, yet every dest has output
    "reference": Params(xways=1, minutes=4, vehicles=200, seed=3, segments=8, directions=1, requests=0.1),
    "tiny": Params(xways=1, minutes=6, vehicles=2_000),
    "small": Params(xways=1, minutes=15, vehicles=4_000),
    "720k": Params(xways=2, minutes=60, vehicles=12_000),
    "3M": Params(xways=4, minutes=120, vehicles=21_700),
}


@dataclass(frozen=True)
class Traffic:
    """The generated CommonInputStr columns (in timestamp order) and the run's length."""

    columns: dict[str, np.ndarray]
    minutes: int
    xways: int

    @property
    def tuples(self) -> int:
        return len(self.columns["Scd"])


def _entries(rng: np.random.Generator, p: Params, ticks: int) -> dict[str, np.ndarray]:
    """Per trip: xway, direction, entry tick, second of the tick, entry and exit distance along the
    direction of travel (feet), free-flow speed."""
    n = p.vehicles * p.xways
    xway = np.repeat(np.arange(p.xways, dtype=np.int64), p.vehicles)
    direction = rng.integers(0, p.directions, n)
    tick0 = rng.integers(0, max(ticks - 4, 1), n)
    phase = rng.integers(0, TICK, n)
    # rush waves: every RUSH_TICKS the share of trips entering near one of three busy ramps (per
    # xway and direction) swells from 0 to BUSY and falls back; the other trips enter anywhere
    ramps = rng.integers(p.segments // 20, p.segments * 3 // 5, (p.xways, 2, 3))
    wave = 0.5 + 0.5 * np.cos(2 * np.pi * tick0 / RUSH_TICKS)  # a run starts at the peak
    busy = rng.random(n) < BUSY * wave
    ramp = ramps[xway, direction, rng.integers(0, 3, n)]
    seg0 = np.where(busy, ramp + rng.integers(0, 3, n), rng.integers(0, p.segments - 5, n))
    start = seg0 * SEG_FEET + rng.integers(0, SEG_FEET, n)
    length = rng.integers(2, 25, n) * SEG_FEET + rng.integers(0, SEG_FEET, n)
    end = np.minimum(start + length, p.road_feet - 1)
    vfree = rng.integers(55, 76, n)
    return {"xway": xway, "dir": direction, "tick0": tick0, "phase": phase, "start": start, "end": end, "vfree": vfree}


def _simulate(rng: np.random.Generator, e: dict[str, np.ndarray], p: Params, ticks: int) -> list[dict[str, np.ndarray]]:
    """Advance every trip tick by tick; one report per active trip and tick."""
    n = len(e["tick0"])
    along = e["start"].copy()  # feet travelled from the west end in the direction of travel
    done = np.zeros(n, bool)
    parts = []
    cell_of = (e["xway"] * 2 + e["dir"]) * p.segments
    for k in range(ticks):
        live = np.flatnonzero((e["tick0"] <= k) & ~done)
        if not len(live):
            continue
        entering = e["tick0"][live] == k
        moving = live[~entering]
        # segment occupancy (travel lanes) before this tick's moves sets this tick's speeds
        seg_along = np.minimum(along // SEG_FEET, p.segments - 1)
        occupancy = np.bincount(cell_of[moving] + seg_along[moving], minlength=p.xways * 2 * p.segments)
        crowd = occupancy[cell_of[live] + seg_along[live]]
        speed = np.maximum(e["vfree"][live] * (1.0 - crowd / JAM), MIN_SPEED).astype(np.int64)
        speed += rng.integers(-2, 3, len(live))
        speed = np.maximum(speed, MIN_SPEED)
        step = np.where(entering, 0, speed * FEET_PER_MPH)
        along[live] += step
        exits = along[live] >= e["end"][live]
        along[live] = np.minimum(along[live], e["end"][live])
        lane = np.where(entering, 0, np.where(exits, 4, 1 + (e["vfree"][live] + k) % 3))
        done[live[exits]] = True
        pos = np.where(e["dir"][live] == 0, along[live], p.road_feet - 1 - along[live])
        parts.append(
            {
                "Scd": k * TICK + e["phase"][live],
                "Vid": live,
                "Speed": np.where(entering, speed // 2, speed),
                "XWay": e["xway"][live],
                "Lane": lane,
                "Dir": e["dir"][live],
                "Pos": pos,
            }
        )
    return parts


def _accidents(rng: np.random.Generator, p: Params, ticks: int, first_vid: int) -> list[dict[str, np.ndarray]]:
    """Per expressway, one accident every 10 minutes: two vehicles drive to the same position and
    stop there (speed 0) for 6-9 reports, the second arriving 1-20 s after the first, then drive
    on and exit."""
    parts = []
    vid = first_vid
    per_xway = max(1, p.minutes // 10)
    for x in range(p.xways):
        for a in range(per_xway):
            direction = int(rng.integers(0, p.directions))
            stop_along = int(rng.integers(p.segments // 10, p.segments * 4 // 5)) * SEG_FEET + int(
                rng.integers(0, SEG_FEET)
            )
            # the first stopped report: spread over the run, 7 minutes before its end when it can
            # be (a short run has its accident at once, so notifications fall inside it)
            lo = 1 + a * max(ticks - 20, 0) // per_xway
            k_stop = min(int(rng.integers(lo, lo + 6)), max(ticks - 14, 1))
            phase_a = int(rng.integers(0, TICK - 20))
            for phase, stops in ((phase_a, int(rng.integers(8, 10))), (phase_a + int(rng.integers(1, 21)), 6)):
                before = 3
                ks = np.arange(k_stop - before, k_stop + stops + 3)
                ks = ks[(ks >= 0) & (ks < ticks)]
                rel = ks - k_stop
                speed = np.where(rel < 0, 60, np.where(rel < stops, 0, 60))
                along = np.where(
                    rel < 0,
                    stop_along + rel * 60 * FEET_PER_MPH,
                    np.where(rel < stops, stop_along, stop_along + (rel - stops + 1) * 60 * FEET_PER_MPH),
                )
                lane = np.where(rel == rel[0], 0, np.where(rel == rel[-1], 4, 1))
                m = len(ks)
                parts.append(
                    {
                        "Scd": ks * TICK + phase,
                        "Vid": np.full(m, vid),
                        "Speed": speed,
                        "XWay": np.full(m, x),
                        "Lane": lane,
                        "Dir": np.full(m, direction),
                        "Pos": np.where(direction == 0, along, p.road_feet - 1 - along),
                    }
                )
                vid += 1
    return parts


def _requests(rng: np.random.Generator, reports: dict[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    """Type-2 (balance) and Type-3 (daily expenditure) requests, each 1-29 s after a report of the
    vehicle sending it (so before its next report), with Qids in time order."""
    n = len(reports["Scd"])
    u = rng.random(n)
    kind = np.where(u < p.requests, 2, np.where(u < p.requests + DAILY_RATE, 3, 0))
    pick = np.flatnonzero(kind > 0)
    scd = reports["Scd"][pick] + rng.integers(1, TICK, len(pick))
    keep = scd < p.minutes * 60
    pick, scd = pick[keep], scd[keep]
    m = len(pick)
    minus = np.full(m, -1, np.int64)
    typ = kind[pick]
    return {
        "Type": typ,
        "Scd": scd,
        "Vid": reports["Vid"][pick],
        "Speed": minus,
        "XWay": np.where(typ == 3, reports["XWay"][pick], -1),
        "Lane": minus,
        "Dir": minus,
        "Seg": minus,
        "Pos": minus,
        "Qid": np.zeros(m, np.int64),  # numbered once all tuples are in time order
        "Sinit": minus,
        "Send": minus,
        "Dow": minus,
        "Tod": minus,
        "Dy": np.where(typ == 3, rng.integers(1, 70, m), -1),
    }


def traffic(p: Params) -> Traffic:
    """All CommonInputStr tuples of the input `p`, in timestamp order."""
    if p.xways < 1 or p.minutes < 2 or p.vehicles < 0 or p.segments < 8 or p.directions not in (1, 2):
        raise ValueError("need 1+ expressways, 2+ minutes, 8+ segments, 1 or 2 directions, 0+ vehicles")
    rng = np.random.default_rng([p.seed, 7])
    ticks = p.minutes * 60 // TICK
    e = _entries(rng, p, ticks)
    parts = _simulate(rng, e, p, ticks) + _accidents(rng, p, ticks, first_vid=len(e["tick0"]))
    reports = {c: np.concatenate([q[c] for q in parts]).astype(np.int64) for c in parts[0]}
    m = len(reports["Scd"])
    reports["Type"] = np.zeros(m, np.int64)
    reports["Seg"] = reports["Pos"] // SEG_FEET
    for c in ("Qid", "Sinit", "Send", "Dow", "Tod", "Dy"):
        reports[c] = np.full(m, -1, np.int64)
    req = _requests(rng, reports, p)
    cols = {c: np.concatenate([reports[c], req[c]]) for c in COLUMNS}
    order = np.lexsort((cols["Vid"], cols["Type"], cols["Scd"]))
    cols = {c: v[order] for c, v in cols.items()}
    asks = cols["Type"] > 0
    cols["Qid"][asks] = np.arange(int(asks.sum()), dtype=np.int64)
    return Traffic(cols, p.minutes, p.xways)


def _write(path: Path, header: str, columns: list[np.ndarray]) -> int:
    opts = pacsv.WriteOptions(include_header=False, quoting_style="none")
    with pa.OSFile(str(path), "wb") as f:
        f.write(header.encode() + b"\n")
        n = len(columns[0])
        for lo in range(0, n, 1_000_000):
            table = pa.table({f"c{j}": c[lo : lo + 1_000_000] for j, c in enumerate(columns)})
            pacsv.write_csv(table, f, write_options=opts)
    return len(columns[0])


def write(p: Params, out: str | Path) -> dict[str, int]:
    """Write the four source files into `out`; returns {file name: tuples}."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t = traffic(p)
    counts = {}
    cols = [t.columns["Scd"]] + [t.columns[c] for c in COLUMNS]
    counts["xway"] = _write(out / "xway", ",".join(["i"] * (1 + len(COLUMNS))), cols)
    mnt = np.arange(p.minutes + 1, dtype=np.int64)
    counts["minstr"] = _write(out / "minstr", "i,i", [mnt * 60, mnt])
    end = np.arange(p.minutes, dtype=np.int64)
    counts["minendstr"] = _write(out / "minendstr", "i,i", [end * 60 + 59, end])
    # every (minute, xway, dir, segment), minute-major
    grid = np.indices((p.minutes, p.xways, p.directions, p.segments)).reshape(4, -1).astype(np.int64)
    counts["minsegstr"] = _write(out / "minsegstr", "i,i,i,i,i", [grid[0] * 60, *grid])
    return counts


def parse_size(text: str) -> int:
    """'720k' → 720000, '3M' → 3000000, '5000' → 5000."""
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    digits = text[:-1] if scale > 1 else text
    return int(float(digits) * scale)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.linear_road.gen", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for the four source files")
    p.add_argument("--tuples", choices=list(PRESETS), help="a named size (default 720k)")
    p.add_argument("--xways", type=int, help="expressways")
    p.add_argument("--minutes", type=int, help="length of the run in minutes")
    p.add_argument("--vehicles", type=int, help="trips per expressway")
    p.add_argument("--seed", type=int, help="random seed (default: the preset's)")
    args = p.parse_args(argv)
    base = PRESETS[args.tuples or "720k"]
    overrides = {"xways": args.xways, "minutes": args.minutes, "vehicles": args.vehicles, "seed": args.seed}
    params = dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})
    began = time.perf_counter()
    counts = write(params, args.out)
    print(
        f"wrote {sum(counts.values()):,} tuples ({', '.join(f'{k} {v:,}' for k, v in counts.items())}) "
        f"to {args.out} in {time.perf_counter() - began:.2f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where the main thread's time goes in `cqlstream run`: start-up, operator steps, hand-overs.

    python -m bench.main_thread [--rows 1000000] [--only Q2,Q4] [--threads 1,2] [--rounds 3] [--json F]
                                [--flags "--reader process"]

Runs each query's script (bench/stream_queries.py) in a fresh process per run, the thread counts
alternated, and prints the medians per query and thread count of what the main thread (the
engine's) did: its CPU until the first operator step (start-up) and in all, its minor page faults
before and after that step, the CPU of the operator steps by operator class, and of
`ResultWriter.write` (the inline formatting at `--threads 1`; the hand-over, and the layouts of
the rounds a writer thread is behind on, at 2) with the wall it spent there beyond its CPU
(waiting for room in a writer's queue, or for the GIL). Thread CPU clocks: meaningful on a
machine shared with other jobs, where walls are not (bench/README.md, session 18).
"""

from __future__ import annotations

import argparse
import atexit
import importlib.abc
import importlib.util
import json
import os
import resource
import shlex
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARK = "main-thread:"


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


KINDS = {"cqlstream-read-": "read", "cqlstream-writer-": "write"}  # thread name prefix → kind
_ended: dict[str, float] = dict.fromkeys(KINDS.values(), 0.0)  # CPU of the threads that have ended


def _kind(t: threading.Thread) -> str | None:
    return next((k for p, k in KINDS.items() if t.name.startswith(p)), None)


def _others() -> dict[str, float]:
    """CPU so far of the reader and writer threads, by kind (ended ones and live ones)."""
    out = dict(_ended)
    for t in threading.enumerate():
        kind = _kind(t)
        if kind is not None and t.ident is not None:
            try:
                out[kind] += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except OSError:  # ended meanwhile (counted by its end)
                pass
    return out


def _count_ends() -> None:
    run = threading.Thread.run

    def counted(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            kind = _kind(self)
            if kind is not None:
                _ended[kind] += time.thread_time()

    threading.Thread.run = counted  # type: ignore[method-assign]


def _when_loaded(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Call `patch(module)` once the module `name` is loaded (imported as the program does, not
    before: importing the engine ahead of the run would change what its start-up overlaps)."""

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            loader = spec.loader if spec is not None else None
            if loader is None:
                return spec
            execute = loader.exec_module

            def exec_module(module: ModuleType) -> None:
                execute(module)
                patch(module)

            loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, Finder())


def one(script: str, threads: int, flags: list[str] | None = None) -> int:
    """One `cqlstream run` in this process, as the program, with the main thread's clocks
    (wrapping the operators' `step` and `ResultWriter.write` once their modules load), printed
    to stderr at exit."""
    began = time.perf_counter()
    steps: dict[str, float] = defaultdict(float)
    first: dict[str, float] = {}
    w = {"cpu": 0.0, "wall": 0.0}

    def patch_step(module: ModuleType) -> None:
        step = module.Operator.step

        def timed_step(self: Any, budget: int | None = None) -> int:
            if not first:
                first.update(cpu=time.thread_time(), wall=time.perf_counter() - began, faults=_faults())
                first.update({f"{k}_startup": v for k, v in _others().items()})
            c = time.thread_time()
            try:
                return step(self, budget)
            finally:
                steps[type(self).__name__] += time.thread_time() - c

        module.Operator.step = timed_step

    def patch_write(module: ModuleType) -> None:
        write = module.ResultWriter.write

        def timed_write(self: Any, rnd: Any) -> None:
            c, t = time.thread_time(), time.perf_counter()
            write(self, rnd)
            w["cpu"] += time.thread_time() - c
            w["wall"] += time.perf_counter() - t

        module.ResultWriter.write = timed_write

    def report() -> None:  # at exit: a run as the program ends in os._exit after the exit handlers
        cpu, faults = time.thread_time(), _faults()
        out = {
            "main": cpu,
            "startup": first.get("cpu", cpu),
            "startup_wall": first.get("wall", 0.0),
            "faults_startup": first.get("faults", faults),
            "faults_after": faults - first.get("faults", faults),
            "steps": sum(steps.values()),
            "write": w["cpu"],
            "write_wait": max(0.0, w["wall"] - w["cpu"]),
            "wall": time.perf_counter() - began,
            # reaped child processes (a reader or writer process): their CPU, on the other core
            "children": (lambda u: u.ru_utime + u.ru_stime)(resource.getrusage(resource.RUSAGE_CHILDREN)),
        }
        out.update({f"step:{k}": v for k, v in steps.items()})
        for k, v in _others().items():  # the reader's and writer's CPU before the first step and after
            out[f"{k}_startup"] = first.get(f"{k}_startup", v)
            out[f"{k}_after"] = v - out[f"{k}_startup"]
        print(MARK, json.dumps(out), file=sys.stderr, flush=True)

    _count_ends()
    _when_loaded("cqlstream.engine.operators.base", patch_step)
    _when_loaded("cqlstream.io.result_writer", patch_write)
    atexit.register(report)
    from cqlstream.cli import main as cli_main

    # as the program: gc paused at start-up
    sys.argv = ["cqlstream", "run", script, "--threads", str(threads), *(flags or [])]
    return cli_main()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--only", default="Q2,Q4", help="comma-separated queries of bench.stream_queries")
    p.add_argument("--threads", default="1,2", help="comma-separated `cqlstream run --threads` counts")
    p.add_argument("--rounds", type=int, default=3, help="runs per query and thread count, alternated")
    p.add_argument("--json", help="also write the medians here, per query and thread count")
    p.add_argument("--flags", default="", help="more `cqlstream run` options for the runs at 2 threads or more")
    p.add_argument("--one", nargs=2, metavar=("SCRIPT", "THREADS"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        return one(a.one[0], int(a.one[1]), shlex.split(a.flags))
    import statistics
    import subprocess

    from bench import bytecode
    from bench.stream_queries import default_cqlstream, write_script

    bytecode.compile_for(default_cqlstream())  # the first run starts as the others (and an install) do
    counts = [int(t) for t in a.threads.split(",")]
    runs: dict[tuple[str, int], list[dict[str, float]]] = defaultdict(list)
    # the child runs this module too (`--one`), outside the package compile_for compiles: its own
    # .pyc is written by the first run
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for _ in range(a.rounds):
        for q in a.only.split(","):
            script = str(write_script(q, a.rows)[0])
            for t in counts:
                cmd = [sys.executable, "-m", "bench.main_thread", "--one", script, str(t)]
                cmd += ["--flags", a.flags] if t > 1 and a.flags else []
                r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
                line = next(x for x in r.stderr.splitlines() if x.startswith(MARK))
                runs[(q, t)].append(json.loads(line[len(MARK) :]))
    medians: dict[str, dict[str, float]] = {}
    print(f"medians of {a.rounds} runs (s of main-thread CPU unless said; load {os.getloadavg()[0]:.1f} at the end)")
    for (q, t), rs in runs.items():
        keys = sorted({k for r in rs for k in r})
        med = medians[f"{q} --threads {t}"] = {k: statistics.median(r.get(k, 0.0) for r in rs) for k in keys}
        ops = " ".join(f"{k[5:]} {v:.3f}" for k, v in med.items() if k.startswith("step:") and v >= 0.002)
        print(
            f"{q} --threads {t}: main {med['main']:.3f} = start-up {med['startup']:.3f} + steps {med['steps']:.3f}"
            f" + write {med['write']:.3f} (+ waited {med['write_wait']:.3f} wall) + rest"
            f" {med['main'] - med['startup'] - med['steps'] - med['write']:.3f}; faults {med['faults_startup']:.0f}"
            f" + {med['faults_after']:.0f}; wall {med['wall']:.2f} (first step at {med.get('startup_wall', 0.0):.2f})\n    steps: {ops}; reader {med['read_startup']:.3f}"
            f" + {med['read_after']:.3f}, writer {med['write_startup']:.3f} + {med['write_after']:.3f} (before + after the"
            f" first step), child processes {med.get('children', 0.0):.3f}"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(medians, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

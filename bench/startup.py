"""Start-up CPU of `cqlstream`: the fixed cost a run pays before its first tuple.

    python -m bench.startup --input DIR [--old OLD_CQLSTREAM] [--repeat 5]

Measures, in fresh processes, the CPU time (user + sys, os.wait4) and peak RSS of
`cqlstream --help`, of a trivial script (one aggregate, one row) and of Linear Road's script over
empty inputs (each of DIR's files cut to its type line), `--stream-compat --threads 1`. With
`--old`, another tree's `cqlstream` executable is run alternately with this one (old, new, old,
...), so both see the same machine load; medians are printed with the load average. Every new
run uses the user's cache folder as a run would ("warm": the dataclass code, parsed statements
and parser tables are there from an earlier run); the `cold` rows give each new run an empty
cache folder holding only the parser tables, so it compiles the dataclasses' methods and parses
every statement, then saves them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import bytecode

PACKAGE = Path(__file__).resolve().parent
LINEAR_ROAD = PACKAGE / "linear_road" / "linearroad.cql"
TRIVIAL = (
    "table : register stream S (a integer, b integer);\nsource : s\n"
    "query : select a, sum(b) from S group by a;\ndest : out\n"
)


def _cpu(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, peak RSS MB) of one run of `cmd`."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def _cases(work: Path, input_dir: Path) -> dict[str, list[str]]:
    empty = work / "empty"
    empty.mkdir()
    for f in sorted(input_dir.iterdir()):
        with open(f) as src:
            (empty / f.name).write_text(src.readline())
    triv = work / "triv"
    triv.mkdir()
    (triv / "s").write_text("i,i,i\n1,1,5\n")
    (work / "trivial.cql").write_text(TRIVIAL)
    return {
        "--help": ["--help"],
        "trivial script": ["run", str(work / "trivial.cql"), "--source-dir", str(triv), "--out-dir", str(work / "o1")],
        "Linear Road, empty inputs": [
            "run",
            str(LINEAR_ROAD),
            "--source-dir",
            str(empty),
            "--out-dir",
            str(work / "o2"),
            "--stream-compat",
        ],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, type=Path, help="a Linear Road input folder (its type lines are used)")
    ap.add_argument("--old", help="another tree's cqlstream executable, run alternately")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    new = str(Path(sys.executable).parent / "cqlstream")
    for exe in [new] + ([args.old] if args.old else []):
        bytecode.compile_for(exe)  # as installed: every run, the first too, starts from .pyc files
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="cqlstream-startup-") as tmp:
        work = Path(tmp)
        cases = _cases(work, args.input)
        tables = sorted((Path(os.environ.get("CQLSTREAM_CACHE_DIR") or _default_cache())).glob("cql-lalr-*"))
        loads = [os.getloadavg()[0]]
        print(f"{'case':28} {'old CPU s':>10} {'new CPU s':>10} {'new cold':>10} {'old/new RSS MB':>15}")
        for name, cli_args in cases.items():
            old_t: list[float] = []
            new_t: list[float] = []
            cold_t: list[float] = []
            rss: tuple[list[float], list[float]] = ([], [])
            extra = ["--threads", "1"] if cli_args[0] == "run" else []
            for i in range(args.repeat):
                if args.old:
                    t, m = _cpu([args.old, *cli_args, *extra], env)
                    old_t.append(t)
                    rss[0].append(m)
                t, m = _cpu([new, *cli_args, *extra], env)
                new_t.append(t)
                rss[1].append(m)
                cold = work / f"cold-{name[:4]}-{i}"
                cold.mkdir()
                for f in tables:
                    shutil.copy(f, cold / f.name)
                cold_t.append(_cpu([new, *cli_args, *extra], {**env, "CQLSTREAM_CACHE_DIR": str(cold)})[0])
                loads.append(os.getloadavg()[0])
            med = statistics.median
            old_s = f"{med(old_t):.3f}" if old_t else "-"
            old_m = f"{med(rss[0]):.0f}" if rss[0] else "-"
            print(
                f"{name:28} {old_s:>10} {med(new_t):>10.3f} {med(cold_t):>10.3f} {old_m + ' / ' + f'{med(rss[1]):.0f}':>15}"
            )
        print(f"medians of {args.repeat}; load average (1 min) {min(loads):.1f}-{max(loads):.1f}")
    return 0


def _default_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cqlstream")


if __name__ == "__main__":
    sys.exit(main())

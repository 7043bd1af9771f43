"""The Linear Road benchmark: STREAM's Linear Road script run by `cqlstream run`, whole process.

    python -m bench.linear_road [--sizes 720k 3M] [--mode compat|paper|both] [--engine-threads 1 2] [--json F]

For each size (a preset of bench/linear_road/gen.py; inputs cached in bench/out/linear_road/) and
mode — `compat`: STREAM's script unmodified with `--stream-compat`; `paper`: linearroad_paper.cql
in paper mode — runs `cqlstream run --source-dir` as a child process and reports wall and CPU
seconds (user + sys of the child), input tuples/s, peak RSS, and per dest (tollstr, accnot,
accbal) the lines written and an order-independent checksum, so a faster engine can show that
its outputs did not change. `--engine-threads 1 2` runs each at both counts, one after the other.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from bench import bytecode
from bench.linear_road import gen

PACKAGE = Path(__file__).resolve().parent
OUT = PACKAGE.parent / "out" / "linear_road"
SCRIPTS = {"compat": (PACKAGE / "linearroad.cql", ["--stream-compat"]), "paper": (PACKAGE / "linearroad_paper.cql", [])}
DESTS = ("tollstr", "accnot", "accbal")
# STREAM 0.6's C++ on this generator's inputs, wall s, as first measured (2026-11-23, on an earlier
# machine of this kind, whose CPU was slower); bench/README.md has the side-by-side runs on the
# current one (2026-12-06, quiet: 2.9-5.0 s wall at 720k, 16.6-19.9 s at 3M, run to run)
STREAM_SECONDS = {"720k": 3.8, "3M": 16.5}


def ensure_input(size: str) -> tuple[Path, int]:
    """The generated input folder of a preset and its tuple count (all four files). Cached under
    a key of the preset and the generator's source, so a changed generator never reuses old files."""
    params = gen.PRESETS[size]
    key = hashlib.sha256(repr(params).encode() + Path(gen.__file__).read_bytes()).hexdigest()[:12]
    folder = OUT / "input" / f"{size}-{key}"
    stamp = folder / "tuples"
    if not stamp.exists():
        stamp.write_text(str(_generate(size, folder)))
    return folder, int(stamp.read_text())


# Run in a child process: memory the generator leaves in this process would be counted in the
# peak RSS of every `cqlstream run` started after it (a forked child's ru_maxrss starts at its
# parent's size before the exec; measured: 3M compat showed 1,279 MB after generating in process,
# 249 MB in the next run).
_GENERATE = (
    "import sys; from pathlib import Path; from bench.linear_road import gen; "
    "print(sum(gen.write(gen.PRESETS[sys.argv[1]], Path(sys.argv[2])).values()))"
)


def _generate(size: str, folder: Path) -> int:
    """Write the input of preset `size` into `folder` in a child process; its tuple count."""
    done = subprocess.run(
        [sys.executable, "-c", _GENERATE, size, str(folder)],
        cwd=PACKAGE.parent.parent,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"generating the {size} input failed:\n{done.stderr}")
    return int(done.stdout.split()[-1])


def checksum_lines(lines: Iterable[str | bytes]) -> str:
    """The sum mod 2**64 of each line's 8-byte BLAKE2b, in hex: the order of the lines (within or
    across instants) does not matter, every line and how often it occurs does."""
    total = 0
    for line in lines:
        data = line.encode() if isinstance(line, str) else line
        total += int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return f"{total % (1 << 64):016x}"


def checksum(path: Path) -> tuple[int, str]:
    """(lines, checksum_lines) of a dest file."""
    with open(path, "rb") as f:
        lines = [line.rstrip(b"\n") for line in f]
    return len(lines), checksum_lines(lines)


def run(size: str, mode: str, cqlstream: str, engine_threads: int = 1) -> dict:
    """One `cqlstream run` of the script of `mode` over the input of `size`, at `engine_threads`."""
    source, tuples = ensure_input(size)
    script, flags = SCRIPTS[mode]
    dest_dir = OUT / "output" / size / mode
    began = time.perf_counter()
    proc = subprocess.Popen(
        [
            cqlstream,
            "run",
            str(script),
            "--source-dir",
            str(source),
            "--out-dir",
            str(dest_dir),
            # only when asked: an older tree's cqlstream (--cqlstream) has no such option
            *(["--engine-threads", str(engine_threads)] if engine_threads != 1 else []),
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"linear road {size} {mode} failed:\n{err}")
    dests = {}
    for d in DESTS:
        lines, digest = checksum(dest_dir / d)
        dests[d] = {"lines": lines, "checksum": digest}
    return {
        "size": size,
        "mode": mode,
        "engine_threads": engine_threads,
        "input_tuples": tuples,
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "input_tuples_per_s": int(tuples / wall),
        "peak_rss_mb": usage.ru_maxrss // 1024,
        "dests": dests,
        "warnings": sum(": warning: " in line for line in err.splitlines()),
    }


def default_cqlstream() -> str:
    """The cqlstream executable next to this Python."""
    return str(Path(sys.executable).with_name("cqlstream"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.linear_road", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["720k", "3M"], choices=list(gen.PRESETS), help="presets to run")
    p.add_argument("--mode", choices=["compat", "paper", "both"], default="both")
    p.add_argument("--json", help="write the report to this file")
    p.add_argument("--cqlstream", default=default_cqlstream(), help="the cqlstream executable")
    p.add_argument(
        "--engine-threads",
        type=int,
        nargs="+",
        default=[1],
        metavar="N",
        help="`cqlstream run --engine-threads` counts to run each size and mode at (default 1)",
    )
    args = p.parse_args(argv)
    modes = ["compat", "paper"] if args.mode == "both" else [args.mode]
    bytecode.compile_for(args.cqlstream)  # time the runs as an installed package starts
    print(
        f"{'size':5} {'mode':6} {'eng':>3} {'tuples':>9} {'wall s':>7} {'cpu s':>7} {'in tuples/s':>11} {'RSS MB':>6}  "
        + "  ".join(f"{d + ' lines':>13} {'checksum':16}" for d in DESTS)
    )
    results = []
    for size in args.sizes:
        for mode in modes:
            for threads in args.engine_threads:
                r = run(size, mode, args.cqlstream, threads)
                results.append(r)
                print(
                    f"{size:5} {mode:6} {threads:3} {r['input_tuples']:9,} {r['wall_s']:7.2f} {r['cpu_s']:7.2f} "
                    f"{r['input_tuples_per_s']:11,} {r['peak_rss_mb']:6,}  "
                    + "  ".join(f"{r['dests'][d]['lines']:13,} {r['dests'][d]['checksum']:16}" for d in DESTS),
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"nproc": os.cpu_count(), "stream_0_6_seconds": STREAM_SECONDS, "results": results}, indent=2)
        )
    return 0

"""Where a `cqlstream run` indexes large arrays with boolean masks, and what positions would cost.

    python -m bench.mask_sites [--min-rows 1000] [--top 30] -- run SCRIPT [cqlstream run options]

Runs the CLI in this process with the engine's modules (`cqlstream.engine.*`) compiled from a
rewritten syntax tree: every `a[b]` read and every `a[b] = v` store goes through a probe. When
`b` is a one-dimensional boolean array of at least --min-rows elements, the probe times the mask
indexing and, on the side, `np.flatnonzero(b)` plus `take` (reads) or position stores, and
prints per source line: calls, elements, the share of true, and both times (ms). The rewritten
code is slower than the real one, and the second of the two timings finds the array in cache, so
the figures rank sites; they are not the run's CPU. A mask indexing is ~2x slower than positions
for mixed masks of 10k+ rows on numpy 2.x, and faster when nearly all true or a long prefix.
"""

from __future__ import annotations

import argparse
import ast
import importlib.machinery
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from types import CodeType
from typing import Any

import numpy as np

STATS: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0, 0.0])  # calls, elems, trues, mask s, pos s
MIN_ROWS = [1000]


def _is_mask(a: Any, b: Any) -> bool:
    return (
        type(b) is np.ndarray
        and b.dtype == np.bool_
        and b.ndim == 1
        and type(a) is np.ndarray
        and len(b) >= MIN_ROWS[0]
    )


def _get(a: Any, b: Any, where: str) -> Any:
    if not _is_mask(a, b):
        return a[b]
    t0 = time.perf_counter()
    r = a[b]
    t1 = time.perf_counter()
    idx = np.flatnonzero(b)
    a.take(idx, axis=0)
    t2 = time.perf_counter()
    s = STATS[where]
    s[0] += 1
    s[1] += len(b)
    s[2] += len(idx)
    s[3] += t1 - t0
    s[4] += t2 - t1
    return r


def _set(a: Any, b: Any, v: Any, where: str) -> None:
    if not _is_mask(a, b):
        a[b] = v
        return
    spare = a.copy()  # the position store is timed on a copy: the mask may be `a` itself
    t0 = time.perf_counter()
    idx = np.flatnonzero(b)
    spare[idx] = v
    t1 = time.perf_counter()
    a[b] = v
    t2 = time.perf_counter()
    s = STATS["store " + where]
    s[0] += 1
    s[1] += len(b)
    s[2] += len(idx)
    s[3] += t2 - t1
    s[4] += t1 - t0


def _plain(s: ast.expr) -> bool:
    return isinstance(s, (ast.Slice, ast.Tuple, ast.Constant))


class _Rewrite(ast.NodeTransformer):
    """`a[b]` → `_mask_get(a, b, "file:line")`; `a[b] = v` → `_mask_set(a, b, v, ...)`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        t = node.targets[0]
        if len(node.targets) == 1 and isinstance(t, ast.Subscript) and not _plain(t.slice):
            call = ast.Call(
                ast.Name("_mask_set", ast.Load()),
                [t.value, t.slice, node.value, ast.Constant(f"{self.name}:{node.lineno}")],
                [],
            )
            return ast.copy_location(ast.Expr(call), node)
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and not _plain(node.slice):
            where = ast.Constant(f"{self.name}:{node.lineno}")
            return ast.copy_location(
                ast.Call(ast.Name("_mask_get", ast.Load()), [node.value, node.slice, where], []), node
            )
        return node


class _Loader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname: str) -> CodeType:  # always from source: no cached bytecode
        tree = ast.parse(self.get_data(self.path).decode())
        name = self.path.split("/engine/", 1)[-1]
        tree = ast.fix_missing_locations(_Rewrite("engine/" + name).visit(tree))
        return compile(tree, self.path, "exec")


class _Finder:
    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if not name.startswith("cqlstream.engine"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            spec.loader = _Loader(name, spec.origin)
        return spec


def report(top: int) -> None:
    print(f"{'site':50s} {'calls':>6s} {'M elems':>8s} {'true %':>7s} {'mask ms':>8s} {'pos ms':>7s}")
    for where, (c, e, t, tm, tp) in sorted(STATS.items(), key=lambda kv: -kv[1][3])[:top]:
        print(f"{where:50s} {c:6d} {e / 1e6:8.2f} {100 * t / max(e, 1):7.1f} {tm * 1e3:8.1f} {tp * 1e3:7.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-rows", type=int, default=1000, help="smallest mask probed (default 1000)")
    ap.add_argument("--top", type=int, default=30, help="sites printed (default 30)")
    ap.add_argument("cli", nargs=argparse.REMAINDER, help="-- then the cqlstream arguments (run SCRIPT ...)")
    args = ap.parse_args(argv)
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    if not cli:
        ap.error("give the cqlstream arguments after --, e.g. -- run script.cql --threads 1")
    if any(m.startswith("cqlstream.engine") for m in sys.modules):
        ap.error("the engine is imported already: run this as its own process")
    MIN_ROWS[0] = args.min_rows
    import builtins

    builtins._mask_get = _get  # type: ignore[attr-defined]
    builtins._mask_set = _set  # type: ignore[attr-defined]
    sys.meta_path.insert(0, _Finder())
    from cqlstream.cli import main as cli_main

    rc = cli_main(cli)
    report(args.top)
    return int(rc or 0)


if __name__ == "__main__":
    raise SystemExit(main())

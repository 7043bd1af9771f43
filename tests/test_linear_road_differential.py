"""STREAM's Linear Road script, engine against the reference evaluator, every dest, both modes.

The input is the generator's `reference` preset: one expressway, 4 minutes, an 8-segment one-way
road, about 1,500 tuples, on which every dest still has output (tolls, accident notifications,
balances). The reference evaluates each query's analyzed plan, with one equivalence applied so
that it runs in seconds: Istream of Filters/Projects over a stream's default Unbounded window is
those Filters/Projects over the stream itself (the implicit Istream of docs/semantics.md; the
reference's Istream recomputes the whole relation at every instant, quadratic in the stream).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.linear_road import gen
from bench.linear_road.bench import DESTS, SCRIPTS
from cqlstream.cql.logical import nodes as L
from cqlstream.io.dat_source import read_source
from cqlstream.io.script_runner import run_script
from cqlstream.io.stream_script import Registrar, parse_script
from tests.reference import evaluate_all, format_result
from tests.test_stream_script import net_lines


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lr_reference")
    gen.write(gen.PRESETS["reference"], out)
    return out


def _is_unbounded_window(n: L.Plan) -> bool:
    return (
        isinstance(n, L.Window)
        and isinstance(n.spec, L.RangeSpec)
        and n.spec.size is None
        and n.spec.slide is None
        and n.input.is_stream
    )


def streamed(plan: L.Plan, memo: dict[int, L.Plan]) -> L.Plan:
    """`plan` with Istream(Filter/Project* (Window Unbounded (S))) → Filter/Project* (S); shared
    subplans stay shared (memo by node identity), so the reference computes them once."""
    if id(plan) in memo:
        return memo[id(plan)]
    changes: dict[str, object] = {}
    for f in dataclasses.fields(plan):
        v = getattr(plan, f.name)
        if isinstance(v, L.Plan):
            if (nv := streamed(v, memo)) is not v:
                changes[f.name] = nv
        elif isinstance(v, tuple) and v and all(isinstance(x, L.Plan) for x in v):
            nt = tuple(streamed(x, memo) for x in v)
            if any(a is not b for a, b in zip(nt, v)):
                changes[f.name] = nt
    out = dataclasses.replace(plan, **changes) if changes else plan  # type: ignore[arg-type]
    if isinstance(out, L.RelToStream) and out.op == "istream":
        chain, n = [], out.input
        while isinstance(n, (L.Filter, L.Project)):
            chain.append(n)
            n = n.input
        if _is_unbounded_window(n):
            assert isinstance(n, L.Window)
            s = n.input
            for c in reversed(chain):
                s = dataclasses.replace(c, input=s)
            out = s
    memo[id(plan)] = out
    return out


def _reference(script: Path, source: Path, compat: bool) -> dict[str, list[str]]:
    reg = Registrar(parse_script(script, compat=compat, source_dir=source), None, compat)
    reg.register_all()
    inputs = {}
    for step, d in reg.sources:
        b = read_source(step.paired_file, d)
        inputs[d.name] = list(zip(b.ts.tolist(), b.rows()))
    memo: dict[int, L.Plan] = {}
    plans = [streamed(q.analyzed.plan, memo) for _, q in reg.queries]  # type: ignore[union-attr]
    results = evaluate_all(plans, inputs, compat=compat, functions=reg.catalog.functions)
    return {
        step.paired_file.name: net_lines("".join(f"{line}\n" for line in format_result(r)))
        for (step, _), r in zip(reg.queries, results)
    }


@pytest.mark.parametrize("mode", ["compat", "paper"])
def test_every_dest_matches_the_reference(source, tmp_path, mode):
    script, flags = SCRIPTS[mode]
    compat = "--stream-compat" in flags
    counts = run_script(script, out_dir=tmp_path, compat=compat, source_dir=source, batch_rows=500)
    want = _reference(script, source, compat)
    assert set(want) == set(DESTS)
    for dest in DESTS:
        got = net_lines((tmp_path / dest).read_text())
        assert got, f"{dest} is empty: the input no longer exercises it"
        assert got == want[dest], dest
    assert sum(counts.values()) >= 50


def test_the_rewrite_keeps_the_reference_result():
    """Istream over the Unbounded window of a filtered stream, and the filtered stream: equal."""
    from cqlstream.cql.analyzer import AnalyzeOptions
    from cqlstream.cql.ddl import catalog_from_ddl
    from cqlstream.cql.frontend import compile_query
    from tests.reference import evaluate

    cat = catalog_from_ddl("register stream S (a integer, b integer);")
    q = compile_query("select a + b from S where a > 1", cat, options=AnalyzeOptions())
    plan = q.analyzed.plan
    assert isinstance(plan, L.RelToStream)
    flat = streamed(plan, {})
    assert not any(isinstance(n, (L.RelToStream, L.Window)) for n in L.walk(flat))
    inputs = {"S": [(1, (2, 3)), (1, (0, 1)), (3, (5, 5)), (3, (5, 5)), (4, (1, 1)), (6, None)]}
    assert evaluate(flat, inputs) == evaluate(plan, inputs) == {1: {(5,): 1}, 3: {(10,): 2}}

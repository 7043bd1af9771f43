"""The benchmarks run end to end at a tiny size (figures are printed, never asserted), and the
whole-process suite's results are checked against the reference evaluator at a tinier one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import operators, stream_queries
from cqlstream.io.script_runner import run_script
from cqlstream.io.stream_script import parse_script
from tests.test_stream_script import _reference_lines, net_lines


def test_operator_families_run(tmp_path, capsys):
    report = tmp_path / "ops.json"
    assert operators.main(["--rows", "3000", "--batch", "700", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert set(data["results"]) == {name for name, _ in operators.FAMILIES}
    assert data["results"]["select"]["output_tuples"] > 0


def test_stream_queries_run_through_the_cli(tmp_path):
    report = tmp_path / "q.json"
    assert stream_queries.main(["--rows", "2000", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert set(data["results"]) == set(stream_queries.QUERIES) == {f"Q{i}" for i in range(1, 8)}
    for q, r in data["results"].items():
        assert r["output_lines"] > 0, q
        assert r["wall_s"] > 0 and r["peak_rss_mb"] > 0 and r["input_tuples_per_s"] > 0, q
    assert data["results"]["Q7"]["queries"] == 100
    assert data["results"]["Q5"]["input_tuples"] == 3 * 2000


def test_stream_queries_pair_speedups_within_rounds():
    """The per-round ratio pairs each first-count run with the runs of its own round, in order."""
    walls = [(1, 1.0), (2, 0.5), (1, 2.0), (2, 1.6), (1, 0.9), (2, 0.9)]
    runs = [{"threads": t, "wall_s": w} for t, w in walls]
    assert stream_queries.pair_speedups(runs, [1, 2], 2) == [2.0, 1.25, 1.0]
    assert stream_queries.pair_speedups(runs, [1, 2], 1) == [1.0, 1.0, 1.0]
    assert stream_queries.pair_speedups(runs[:3], [1, 2], 2) == [2.0]  # an unfinished round is left out


def test_stream_queries_clocks_and_writer_processes(tmp_path):
    """--clocks reports per-thread clocks; with --writer process the 2-thread run's formatting is a
    child's CPU (the 1-thread run has none; its few ms are a library lookup)."""
    report = tmp_path / "q.json"
    argv = ["--rows", "300", "--only", "Q2", "--threads", "1,2", "--writer", "process", "--clocks"]
    assert stream_queries.main([*argv, "--json", str(report)]) == 0
    runs = json.loads(report.read_text())["results"]["Q2"]["runs"]
    one, two = (r["clocks"] for r in runs)
    assert one["main"] > 0 and two["children"] > one["children"] + 0.05  # the child imports numpy at least
    assert all(c["wall"] > 0 and c["runq"] >= 0 for c in (one, two))


def test_stream_queries_clocks_per_thread_kind(tmp_path):
    """--clocks also splits the other threads' CPU by kind (readers, writers, engine workers) and
    gives the main thread's blocked time: at 1 thread there are none, at 2 a reader and a writer
    (and with --engine-threads 2 an engine worker, which may or may not have taken a part)."""
    report = tmp_path / "q.json"
    argv = ["--rows", "3000", "--only", "Q4", "--threads", "1,2", "--clocks", "--run-flags", "2=--engine-threads 2"]
    assert stream_queries.main([*argv, "--json", str(report)]) == 0
    one, two = (r["clocks"] for r in json.loads(report.read_text())["results"]["Q4"]["runs"])
    assert one["read"] == one["write"] == one["engine"] == 0
    assert two["read"] > 0 and two["write"] > 0 and two["engine"] >= 0
    assert two["read"] + two["write"] + two["engine"] <= two["others"] + 0.01
    assert all(c["blocked"] >= 0 and c["blocked"] <= c["wall"] for c in (one, two))


def test_stream_queries_match_the_reference(tmp_path):
    """Each suite query's dest files, in net form, equal the reference evaluator's result (Q7: a few
    of its 100 queries; Q5, whose reference cross product is too slow at a size with output: the
    same result whatever the push size)."""
    rows = 300
    for q in stream_queries.QUERIES:
        stream_queries.run_query(q, rows, stream_queries.default_cqlstream())
        script, dests = stream_queries.write_script(q, rows)
        steps = [s for s in parse_script(script).steps if s.kind == "query"]
        assert len(steps) == len(dests)
        if q == "Q5":
            small = run_script(script, out_dir=tmp_path / "q5", batch_rows=7)
            assert sum(small.values()) > 0
            assert net_lines(dests[0].read_text()) == net_lines((tmp_path / "q5" / dests[0].name).read_text())
            continue
        picked = list(zip(steps, dests))
        if len(picked) > 4:
            picked = picked[:3] + picked[-1:]
        for step, dest in picked:
            assert net_lines(dest.read_text()) == _reference_lines(script, step.text), (q, dest.name)


def test_sharing_bench_runs_and_sharing_keeps_results():
    from bench import sharing

    on = sharing.one(20, 3000, 500, True)
    off = sharing.one(20, 3000, 500, False)
    assert on["output_tuples"] == off["output_tuples"] > 0
    assert on["windows"] == 1 and off["windows"] == 20


def test_spark_bridge_bench_counts_every_row(tmp_path):
    """`--quick`: one local[1] child, three micro-batches of 1,000 rows per mode. Through the bridge
    (in process and over HTTP) the rows applied equal the rows Spark reports producing, and the
    selection's subscriber received every selected row (values 0..2999 that are multiples of 10)."""
    report = tmp_path / "spark.json"
    out = subprocess.run(
        [sys.executable, "-m", "bench.spark_bridge", "--quick", "--json", str(report)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(report.read_text())
    runs = {r["mode"]: r for r in data["results"]}
    assert set(runs) == {"noop", "arrow", "engine", "http"}
    assert all(r["rows_per_s"] > 0 and r["master"] == "local[1]" for r in runs.values())
    for mode in ("engine", "http"):
        (check,) = runs[mode]["check"]["rounds"]
        assert check["spark_rows"] == check["bridge_rows"] == 3 * 1000, (mode, check)
        assert check["selected_received"] == check["selected_expected"] == 300, (mode, check)
        assert check["aggregate_rows_received"] > 0, (mode, check)
        assert runs[mode]["latency_samples"] == 200  # the two measured batches' selected rows
    assert "| local[1] | 1,000 | http |" in out.stdout


def test_soak_quick_run_counts(tmp_path):
    """The soak at a few seconds: every push answered, every subscriber of a query holds the same
    elements (the SSE ones resumed with Last-Event-ID on the way), no errors; timings not asserted.
    A child process, as a user runs it (and with its own event loop: a browser test's may be running here)."""
    report = tmp_path / "soak.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--quick", "--json", str(report)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(report.read_text())
    assert data["errors"] == []
    assert data["pushes"] == data["pushers"] * 30
    assert data["subscribers"] == 8 and all(n == 2 for n in data["formats"].values())
    assert data["reconnects"] > 0, "the SSE subscribers resumed at least once"
    assert data["latency_samples"] > 0 and data["rss_mb"]["end"] > 0
    per_query = data["elements_per_query"]
    assert len(per_query) == 4 and all(n > 0 for n in per_query.values())
    assert data["elements_received"] == 2 * sum(per_query.values())


def test_adaptive_bench_runs_and_every_order_and_scheduler_agrees(tmp_path):
    """The bench itself asserts that every order and every scheduler gave the same output."""
    from bench import adaptive

    report = tmp_path / "adaptive.json"
    assert (
        adaptive.main(["--rows", "20000", "--batch", "2000", "--ticks", "30", "--repeat", "1", "--json", str(report)])
        == 0
    )
    data = json.loads(report.read_text())
    assert set(data["filters"]) == {"a-greedy", "sweep", "independent", "local-swaps", *adaptive.FIXED}
    assert set(data["chain"]["runs"]) == {"round-robin", "fifo", "greedy", "chain"}
    # Example 4.5.1: A-Greedy finds the optimum, Independent keeps the correlated filter last
    for n, row in data["trap"].items():
        assert row["a-greedy"]["evaluations"] == row["optimal"] == 1.49
        assert row["independent"]["evaluations"] == row["thesis_independent"] == round(0.49 * int(n) + 0.51, 2)
    # the thesis' toy schedules: its peaks reproduced, Chain at or below both
    burst, chain3 = data["toy"].values()
    assert (burst["fifo"]["peak"], burst["greedy"]["peak"], burst["chain"]["peak"]) == (4.0, 2.2, 2.2)
    assert (chain3["fifo"]["peak"], chain3["greedy"]["peak"], chain3["chain"]["peak"]) == (5.0, 6.4, 5.0)
    assert (
        data["filters"]["fixed worst for phase 2"]["ops_per_tuple"][1] > data["filters"]["a-greedy"]["ops_per_tuple"][1]
    )


def test_linear_road_bench_runs_both_modes(tmp_path):
    """STREAM's Linear Road script (compat) and its paper version, through `cqlstream run`, on the
    generator's smallest preset: every dest has output, the two modes the same checksums."""
    from bench.linear_road import bench as linear_road

    report = tmp_path / "lr.json"
    assert linear_road.main(["--sizes", "reference", "--mode", "both", "--json", str(report)]) == 0
    results = json.loads(report.read_text())["results"]
    assert [(r["size"], r["mode"]) for r in results] == [("reference", "compat"), ("reference", "paper")]
    compat, paper = results
    for r in results:
        assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_mb"] > 0 and r["input_tuples"] > 1000
        assert all(d["lines"] > 0 for d in r["dests"].values()), r
    assert compat["warnings"] == 4 and paper["warnings"] == 0
    # two engine threads (the parallel scheduler, the aggregate in parts): the same outputs
    assert (
        linear_road.main(["--sizes", "reference", "--mode", "compat", "--engine-threads", "2", "--json", str(report)])
        == 0
    )
    (both,) = json.loads(report.read_text())["results"]
    assert both["engine_threads"] == 2 and both["dests"] == compat["dests"]
    assert compat["dests"] == paper["dests"]
    assert linear_road.checksum_lines(["a", "b", "b"]) == linear_road.checksum_lines(["b", "a", "b"])
    assert linear_road.checksum_lines(["a", "b"]) != linear_road.checksum_lines(["a", "b", "b"])


def test_latency_quick_run_counts(tmp_path):
    """The latency bench at its smoke size: a real `cqlstream serve`, a pusher and subscribers in
    their own processes; every measured push reaches every subscriber, in both modes (event time
    with heartbeats, system timestamps with a 1 ms tick); timings not asserted."""
    report = tmp_path / "latency.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.latency", "--quick", "--json", str(report)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads(report.read_text())["results"]
    assert {(r["mode"], r["subscribers"]) for r in results} == {
        ("event", 1),
        ("event", 3),
        ("system", 1),
        ("system", 3),
    }
    for r in results:
        assert r["errors"] == [] and r["push_errors"] == 0, r
        assert r["pushes"] > 0 and r["samples"] == r["pushes"] * r["subscribers"] and r["missing"] == 0, r
        assert r["achieved_rate"] > 0 and r["p50_ms"] > 0, r
    assert "| event | 1,000 |" in run.stdout


def test_boundedness_bench_runs(tmp_path):
    """bench.boundedness at a tiny size: every Table I and worked-example verdict agrees with the
    paper by both procedures, and the synopsis join's state stays flat where the ordinary join's grows."""
    from bench import boundedness

    out = tmp_path / "b.json"
    assert boundedness.main(["--only", "table,memory", "--tuples", "8000", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    # Theorem 8.6's rows compare with the corrected answer (the printed statement omits a condition)
    assert all(r.get("corrected", r["paper"]) == r["enumeration"] == r["checker"] for r in report["table"])
    assert sum("corrected" in r and r["corrected"] != r["paper"] for r in report["table"]) == 3
    for r in report["memory"]:
        sizes = r["bytes"]
        if r["plan"] in ("synopsis join", "synopsis agg."):
            assert max(sizes) - min(sizes) < sizes[0] // 10, r
        else:
            assert sizes[0] < sizes[-1], r


def test_server_threads_bench_counts_equal_results():
    """bench.server_threads at a tiny size: servers at 1 and 2 engine threads (round robin, then
    parallel) give the same result elements per query; timings not asserted."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.server_threads", "--rows", "6000", "--batch", "2000", "--rounds", "1"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "threads 1 (round-robin)" in run.stdout and "threads 2 (parallel)" in run.stdout, run.stdout
    assert "results equal at every count: True" in run.stdout, run.stdout


def test_server_threads_bench_in_process_counts_equal_results():
    """bench.server_threads --in-process (the engine alone, its default limits): equal result
    elements at 1 and 2 threads, and the parallel passes' spans printed; timings not asserted."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.server_threads", "--rows", "6000", "--batch", "2000", "--rounds", "1"]
        + ["--in-process"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "results equal at every count: True" in run.stdout, run.stdout
    assert "threads 2 (parallel)" in run.stdout and "span as a DAG" in run.stdout, run.stdout

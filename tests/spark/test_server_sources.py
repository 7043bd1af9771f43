"""Spark sources of a real `cqlstream serve` (uvicorn on 127.0.0.1, Spark embedded, local[2], one
session for the module): started over HTTP, their results equal the reference evaluator's; they
show as control tables, in /plan and /metrics; bad definitions and dead sources are clear errors;
the remote mode (`HttpSink`, `cqlstream feed`) applies a replayed batch once; stopping the server
stops the streaming queries. Every wait is bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from cqlstream.client import Client, CqlstreamError
from cqlstream.server.settings import Settings
from cqlstream.spark_bridge import HttpSink, SparkSource, SparkSourceConfig
from tests.engine_harness import run_reference
from tests.server.conftest import ServerThread
from tests.spark.test_source import AGGREGATE, CLICKS_SCHEMA, DDL, JOIN, click_files, events, order_files, write_files

WAIT = 90  # seconds: the longest any wait here may take (Spark starts in ~10 s)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerThread(Settings(spark_master="local[2]", checkpoint_dir=str(tmp_path_factory.mktemp("ck")))).start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    with Client(server.url, timeout=WAIT) as c:
        yield c


def wait_for(what: str, check, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while True:
        out = check()
        if out:
            return out
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def collect(c: Client, qid: int, until: int) -> tuple[threading.Thread, list]:
    """A subscriber in a thread, from now until results are final through `until`."""
    got: list = []
    t = threading.Thread(target=lambda: got.extend(c.subscribe(qid, until=until)), daemon=True)
    t.start()
    return t, got


def net(elements, below: int) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for e in elements:
        if e.ts < below:
            out.setdefault(e.ts, Counter())[tuple(e.row)] += e.sign
    return {t: Counter({k: v for k, v in c.items() if v}) for t, c in out.items() if any(c.values())}


def reference(query: str, inputs, below: int) -> dict[int, Counter]:
    return {t: c for t, c in run_reference(DDL, query, inputs).items() if t < below}


def test_csv_sources_started_over_http_feed_an_aggregate_and_a_join(server, client, tmp_path):
    orders, clicks = order_files(11), click_files(12)
    write_files(tmp_path / "orders", "t,item,qty,price", orders)
    write_files(tmp_path / "clicks", "t,item,uid", clicks)
    for ddl in DDL.strip(";").split(";"):
        client.register_stream(ddl)
    agg = client.register_query(AGGREGATE)["id"]
    join = client.register_query(JOIN)["id"]
    end = max(r[0] for f in orders + clicks for r in f) + 50
    subs = [collect(Client(server.url, timeout=WAIT), q, end - 1) for q in (agg, join)]
    time.sleep(0.5)  # the subscribers are attached before any row arrives
    # the one-line form (text) and the JSON form of a definition
    out = client.add_spark_source(f"Orders=csv:{tmp_path / 'orders'}?time=t&maxFilesPerTrigger=1&trigger=available-now")
    assert out["id"] == "spark:Orders" and out["state"] in ("starting", "running", "finished")
    client.add_spark_source(
        {
            "stream": "Clicks",
            "format": "csv",
            "path": str(tmp_path / "clicks"),
            "time_column": "t",
            "options": {"maxFilesPerTrigger": 1},
            "trigger": "available-now",
        }
    )
    for stream in ("Orders", "Clicks"):
        wait_for(f"{stream} to finish", lambda s=stream: client.spark_source(s)["state"] == "finished")
    for stream in ("Orders", "Clicks"):
        client.heartbeat(stream, end)
    for t, _ in subs:
        t.join(WAIT)
        assert not t.is_alive(), "a subscriber did not reach the end"
    inputs = {"Orders": events(orders), "Clicks": events(clicks)}
    assert net(subs[0][1], end) == reference(AGGREGATE, inputs, end)
    assert net(subs[1][1], end) == reference(JOIN, inputs, end)

    # each source is an entity: its control table, an edge into its stream in /plan, /metrics, CLI
    table = client.entity("spark:Orders")
    assert table["kind"] == "spark_source" and table["feeds"] == "Orders" and table["queries"] == sorted([agg, join])
    assert table["counters"]["batches"] == 3 and table["counters"]["rows"] == sum(map(len, orders))
    assert table["counters"]["last_batch_id"] == 2 and table["counters"]["late_rows"] == 0
    plan = client.plan("json")
    assert {"queue": None, "from": "spark:Orders", "to": "src:Orders", "queries": sorted([agg, join])} in plan["edges"]
    assert "spark:Clicks" in client.plan("text")
    assert 'cqlstream_spark_source_rows{source="Orders"} 36' in client.metrics()
    cli = subprocess.run(
        [sys.executable, "-m", "cqlstream", "sources", "--url", server.url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert cli.returncode == 0, cli.stderr
    assert "Orders" in cli.stdout and "finished" in cli.stdout and "rows 36" in cli.stdout

    # removing a source stops it and takes its entity away; the stream stays
    client.remove_spark_source("Clicks")
    assert [s["stream"] for s in client.spark_sources()] == ["Orders"]
    with pytest.raises(CqlstreamError) as e:
        client.entity("spark:Clicks")
    assert e.value.status == 404


def test_bad_definitions_are_clear_errors(server, client, tmp_path):
    client.register_stream("register stream Bad (item int, price float)")
    (tmp_path / "in").mkdir()
    cases = [
        # (definition, status, code, words the message must hold)
        (f"Bad=csv:{tmp_path / 'in'}?schema=ts LONG, item STRING", 422, "bad_source", ["missing", "price", "item"]),
        (f"Nope=csv:{tmp_path / 'in'}", 422, "bad_source", ["no stream or relation named 'Nope'"]),
        ("Bad", 422, "bad_source", ["expected STREAM=FORMAT"]),
        ("Bad=csv", 422, "bad_source", ["needs a path"]),
        ("Bad=nosuchformat", 422, "bad_source", ["nosuchformat"]),
        ("Bad=csv:/x?delay=soon", 422, "bad_source", ["delay must be an integer"]),
    ]
    problems = []
    for spec, status, code, words in cases:
        with pytest.raises(CqlstreamError) as e:
            client.add_spark_source(spec)
        assert (e.value.status, e.value.problem["code"]) == (status, code), (spec, e.value.problem)
        for w in words:
            assert w in e.value.problem["detail"], (spec, e.value.problem["detail"])
        problems.append(e.value.problem)
    # the schema mismatch lists the columns at fault as members of the problem, too
    assert problems[0]["missing"] == ["price"] and problems[0]["mistyped"][0].startswith("item (string")
    # the server keeps serving
    assert client.health()["status"] == "ok"


def test_a_dead_source_reports_why(server, client):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there
    client.register_stream("register stream Lines (a int)")
    client.add_spark_source(f"Lines=socket:127.0.0.1:{port}")
    out = wait_for("the socket source to fail", lambda: (o := client.spark_source("Lines"))["state"] == "failed" and o)
    assert "Connection refused" in out["error"] or "connect" in out["error"].lower(), out["error"]
    assert client.entity("spark:Lines")["state"] == "failed"
    # a failed source can be replaced by a working definition of the same stream
    client.remove_spark_source("Lines")
    assert client.health()["status"] == "ok"


def test_a_socket_source_reads_csv_lines(server, client):
    """Lines from a socket (this test listens; Spark connects), each a CSV row: event time, fields."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(WAIT)
    port = listener.getsockname()[1]
    client.register_stream("register stream Sock (a int, b varchar(8))")
    qid = client.register_query("select a, b from Sock [Range 100]")["id"]
    client.add_spark_source(
        f"Sock=socket:127.0.0.1:{port}?time=t&trigger=200 milliseconds&schema=t LONG, a INT, b STRING"
    )
    conn, _ = listener.accept()
    try:
        conn.sendall(b"1,5,x\n2,6,y\n4,7,z\n")
        wait_for("the socket rows", lambda: client.spark_source("Sock")["counters"]["rows"] == 3)
        snap = list(client.subscribe(qid, snapshot=True, follow=False))
        assert sorted(e.row for e in snap) == [(5, "x"), (6, "y")] and snap[0].ts == 3  # final through 4 − 1
    finally:
        conn.close()
        listener.close()
        client.remove_spark_source("Sock")


def test_remote_pushes_apply_a_replayed_batch_once(server, client, tmp_path):
    """The remote mode: a Spark job in another place (here: this process's session, into the
    server over HTTP) fails after the server applied a batch; the restart re-sends it under the
    same idempotency key, and the server applies it once."""
    spark = server.host.spark.sources().runtime.session()
    client.register_stream("register stream Remote (item int, uid int)")
    qid = client.register_query("select count(*) from Remote [Range 1000]")["id"]
    files = click_files(21, n_files=3)
    write_files(tmp_path / "in", "t,item,uid", files)
    crashed = []

    def crash_once(batch_id: int, _: pa.Table) -> None:
        if batch_id == 1 and not crashed:
            crashed.append(batch_id)
            raise RuntimeError("forced failure after the push")

    df = (
        spark.readStream.schema(CLICKS_SCHEMA)
        .option("header", True)
        .option("maxFilesPerTrigger", 1)
        .csv(str(tmp_path / "in"))
    )
    cfg = SparkSourceConfig(stream="Remote", time_column="t", checkpoint=str(tmp_path / "ck"), available_now=True)
    sink = HttpSink(server.url)
    src = SparkSource(sink, df, cfg, on_applied=crash_once)
    src.start()
    with pytest.raises(Exception, match="forced failure"):
        src.await_termination(WAIT)
    src.start()  # Spark resumes from the checkpoint and re-delivers batch 1
    assert src.await_termination(WAIT)
    sink.close()
    assert crashed == [1] and src.counters()["skipped_replays"] == 1
    total = sum(map(len, files))
    assert client.stream("Remote")["accepted"] == total
    # the last batch's heartbeat (its largest event time) makes results final just below it
    top = max(r[0] for f in files for r in f)
    snap = list(client.subscribe(qid, snapshot=True, follow=False))
    below = sum(1 for f in files for r in f if r[0] < top)
    assert [(e.ts, e.row) for e in snap] == [(top - 1, (below,))]


def test_cqlstream_feed_pushes_a_directory(server, client, tmp_path):
    files = order_files(31, n_files=2, per_file=5)
    write_files(tmp_path / "orders", "t,item,qty,price", files)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    spec = f"Fed=csv:{tmp_path / 'orders'}?time=t&trigger=available-now&maxFilesPerTrigger=1"
    feed = subprocess.run(
        [
            sys.executable,
            "-m",
            "cqlstream",
            "feed",
            "--url",
            server.url,
            "--ddl",
            "register stream Fed (item int, qty int, price float)",
            "--source",
            spec,
            "--spark-master",
            "local[1]",
            "--checkpoint-dir",
            str(tmp_path / "ck"),
        ],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        cwd=ROOT,
    )
    assert feed.returncode == 0, feed.stdout + feed.stderr
    assert "Spark started in" in feed.stdout and "Fed: 2 batches, 10 rows, 0 late" in feed.stdout
    assert client.stream("Fed")["accepted"] == 10
    assert client.stream("Fed")["max_ts"] == max(r[0] for f in files for r in f)


def test_the_readme_pipeline(tmp_path):
    """README.md's Spark pipeline commands, as written, against a `cqlstream serve` child process."""
    import shlex

    from tests.server.conftest import ServerProcess
    from tests.test_readme import BLOCKS, SKIPPED

    key = "mkdir -p orders"
    assert "tests/spark/test_server_sources.py" in SKIPPED[key]
    (block,) = [b for b in BLOCKS if b.lang == "bash" and b.first.startswith(key)]
    mkdir, serve, query, add = block.text.strip().splitlines()
    subprocess.run(["bash", "-c", mkdir], cwd=tmp_path, check=True, timeout=10)
    assert serve.startswith(".venv/bin/cqlstream serve ") and serve.endswith(" &")
    srv = ServerProcess(*shlex.split(serve[len(".venv/bin/cqlstream serve ") : -2]))
    try:
        srv.wait_ready()
        exe = [sys.executable, "-m", "cqlstream"]
        follow = shlex.split(query[len(".venv/bin/cqlstream ") : -2]) + ["--url", srv.url]
        follower = subprocess.Popen(exe + follow, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        lines: list[str] = []
        assert follower.stdout is not None
        out = follower.stdout
        threading.Thread(target=lambda: lines.extend(iter(out.readline, "")), daemon=True).start()
        time.sleep(1.0)  # the follower has registered its query
        spec = add.split('--add "', 1)[1].rstrip('"').replace("$PWD", str(tmp_path))
        added = subprocess.run(
            exe + ["sources", "--url", srv.url, "--add", spec],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert added.returncode == 0, added.stderr
        # the file's rows at instants 1..3; the batch's heartbeat (3) makes 1 and 2 final
        wait_for("the follower's results", lambda: len(lines) >= 2)
        assert lines[:2] == ["[1]:+:7, 2\n", "[2]:+:8, 5\n"], lines
        follower.terminate()
        follower.wait(10)
    finally:
        srv.stop()


def test_stopping_the_server_stops_the_streaming_queries(server, client):
    client.register_stream("register stream Ticks (value int) with (unit = millisecond)")
    client.add_spark_source("Ticks=rate?rowsPerSecond=20&trigger=200 milliseconds")
    wait_for("rate rows", lambda: client.spark_source("Ticks")["counters"]["rows"] > 0)
    sources = server.host.spark.sources().all()
    queries = [s.query for s in sources if s.query is not None]
    server.stop()
    assert all(not q.isActive for q in queries)


def test_without_java_a_spark_source_is_503_spark_unavailable(tmp_path):
    """A server whose Spark cannot start (no Java) answers 503 `spark_unavailable`, and keeps serving."""
    import socket

    import httpx

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAVA_HOME": str(tmp_path / "no-java"), "PATH": "/usr/sbin:/sbin"}
    cmd = [sys.executable, "-m", "cqlstream", "serve", "--port", str(port), "--log-level", "warning"]
    cmd += ["--ddl", "register stream S (a int)"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for("the server", lambda: _answers(url), timeout=30)
        r = httpx.post(url + "/spark/sources", content=b"S=rate", headers={"content-type": "text/plain"}, timeout=60)
        assert r.status_code == 503 and r.json()["code"] == "spark_unavailable", r.text
        assert "Java" in r.json()["detail"]
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(20)


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False

"""The distributed mode on a real Spark standalone cluster, as the compose profile `spark-cluster`
runs it: a master and two workers started from pyspark's own Spark (`spark-class`), on 127.0.0.1
only, and `cqlstream spark-run --spark-master spark://…` as the driver. The results, written by the
executors of both workers into Parquet, equal the reference evaluator's instant by instant. Every
process is stopped at the end; every wait is bounded."""

from __future__ import annotations

import collections
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.engine_harness import run_reference

BIN = Path(sys.executable).parent
DDL = "register stream S (k int, v int)"
QUERY = "select k, sum(v) from S [Range 10] group by k"
START = 60  # seconds for the master and both workers to register
RUN = 300  # seconds for the whole spark-run job


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(tmp: Path) -> dict[str, str]:
    return os.environ | {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(tmp / "work"),
        "SPARK_LOG_DIR": str(tmp / "logs"),
        "PYSPARK_PYTHON": sys.executable,
    }


def daemon(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN / "spark-class"), *args],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # its own process group: the JVM and its launcher stop together
    )


def stop(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("cluster")
    env = spark_env(tmp)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log = tmp / "master.log"
    procs = [
        daemon(
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
            + ["--webui-port", str(free_port())],
            master_log,
            env,
        )
    ]
    try:
        for i in range(2):
            procs.append(
                daemon(
                    ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(free_port())]
                    + ["--webui-port", str(free_port()), "--cores", "1", "--memory", "1g", url],
                    tmp / f"worker{i}.log",
                    env,
                )
            )
        deadline = time.monotonic() + START
        while master_log.read_text().count("Registering worker") < 2:
            assert time.monotonic() < deadline, "workers did not register:\n" + master_log.read_text()[-3000:]
            assert all(p.poll() is None for p in procs), "a Spark daemon exited:\n" + master_log.read_text()[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        for p in reversed(procs):
            stop(p)


def write_input(folder: Path, seed: int = 1) -> list[tuple]:
    """Three CSV files (one per micro-batch), ten rows per instant; the events for the reference."""
    rnd = random.Random(seed)
    folder.mkdir(parents=True)
    events = []
    for f in range(3):
        with (folder / f"part{f}.csv").open("w") as out:
            out.write("t,k,v\n")
            for i in range(200):
                t, k, v = (f * 200 + i) // 10, rnd.randint(0, 9), rnd.randint(0, 100)
                out.write(f"{t},{k},{v}\n")
                events.append((t, (k, v)))
        os.utime(folder / f"part{f}.csv", (time.time() - 100 + f,) * 2)  # Spark reads the oldest first
    return events


def test_spark_run_on_a_master_and_two_workers(cluster: str, tmp_path: Path) -> None:
    events = write_input(tmp_path / "s")
    out = tmp_path / "out"
    run = subprocess.run(
        [str(BIN / "cqlstream"), "spark-run", "--ddl", DDL, QUERY]
        + ["--source", f"S=csv:{tmp_path / 's'}?maxFilesPerTrigger=1", "--sink", f"parquet:{out}"]
        + ["--checkpoint", str(tmp_path / "ckpt"), "--spark-master", cluster],
        capture_output=True,
        text=True,
        timeout=RUN,
        env=spark_env(tmp_path),
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "partitioning: by S.k" in run.stdout + run.stderr
    got: dict[int, collections.Counter] = {}
    for r in ds.dataset(out, format="parquet").to_table().to_pylist():
        got.setdefault(r["ts"], collections.Counter())[(r["k"], r["sum_v"])] += r["sign"]
    clean = {t: collections.Counter({k: n for k, n in c.items() if n}) for t, c in got.items()}
    got = {t: c for t, c in clean.items() if c}
    expected = run_reference(DDL, QUERY, {"S": sorted(events, key=lambda e: e[0])})
    last = max(got)
    assert last == 59  # every instant the watermark closed: the last one waits for later input
    assert got == {t: c for t, c in expected.items() if t <= last}

"""README's curl examples work beside the running demo: run against a real server that already
holds the demo's streams, relation and queries (as `make demo` registers them), every request of
the input block succeeds and the result block streams the registered query's results."""

from __future__ import annotations

import json
import shutil
import subprocess

from cqlstream.client import Client
from cqlstream.demo_shop import CATALOG, QUERIES
from tests.test_readme import BLOCKS

# every request fails the script on an HTTP error and prints one JSON reply per line
STRICT_CURL = 'curl() { command curl -sS --fail-with-body --max-time 5 "$@"; echo; }\n'


def _block(first: str) -> str:
    (b,) = [b for b in BLOCKS if b.lang == "bash" and b.first.startswith(first)]
    return b.text


def _run(script: str, url: str) -> subprocess.CompletedProcess[str]:
    text = STRICT_CURL + "set -e\n" + script.replace("localhost:8000", url.removeprefix("http://"))
    return subprocess.run(["bash", "-c", text], capture_output=True, text=True, timeout=60)


def test_curl_examples_run_beside_the_demo(server):
    assert shutil.which("curl"), "the README's examples use curl: install it (Debian: apt-get install curl)"
    with Client(server.url) as c:
        for ddl in CATALOG:
            c.register_stream(ddl)
        for name, cql in QUERIES:
            c.register_query(cql, name=name)
    inputs = _run(_block("curl -X POST localhost:8000/streams"), server.url)
    assert inputs.returncode == 0, inputs.stdout + inputs.stderr
    replies = [json.loads(line) for line in inputs.stdout.splitlines() if line.strip()]
    (query,) = [r for r in replies if r.get("name") == "sales_per_item"]
    assert query["id"] == len(QUERIES) + 1 and query["kind"] == "relation"

    # the snapshot and the changes after it; the stream stays open (curl's time limit ends it)
    results = _block("curl -N").splitlines()[0].replace("/queries/N/", f"/queries/{query['id']}/")
    out = _run(results, server.url)
    assert out.returncode == 28, out.stderr  # 28: curl's --max-time reached on the open stream
    rows = sorted(tuple(json.loads(line)["row"]) for line in out.stdout.splitlines() if '"row"' in line)
    assert rows == [(1, 1), (2, 2), (4, 6)]

"""README's first command, `make demo` = `cqlstream serve --demo`: the server comes up on
127.0.0.1, the demo shop registers itself through the API and its queries produce results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cqlstream.client import Client
from tests.demo_process import running_demo

CQLSTREAM = str(Path(sys.executable).with_name("cqlstream"))


def test_serve_demo_registers_the_shop_and_streams_results():
    with running_demo(CQLSTREAM) as (url, _lines):
        with Client(url, timeout=10) as c:
            names = {q["name"]: q["id"] for q in c.queries()}
            assert set(names) == {"big_orders", "sales_last_10s", "clicks_then_orders", "engine_load"}
            snap = list(c.subscribe(names["sales_last_10s"], snapshot=True, follow=False))
            assert snap and all(e.sign == 1 and 1 <= e.row[0] <= 6 for e in snap)
            assert c.entity("src:Orders")["counters"]["accepted"] > 0
        text = subprocess.run([CQLSTREAM, "plan", "--url", url], capture_output=True, text=True, timeout=30)
        assert text.returncode == 0 and text.stdout.startswith("Global plan: 4 queries"), text.stderr
        graph = json.loads(
            subprocess.run(
                [CQLSTREAM, "plan", "--url", url, "--json"], capture_output=True, text=True, timeout=30
            ).stdout
        )
        ids = {n["id"] for n in graph["nodes"]}
        assert {"src:Orders", "query:1"} <= ids and all(e["to"] in ids for e in graph["edges"])

"""README's first command, `make demo` = `cqlstream serve --demo`: the server comes up on
127.0.0.1, the demo shop registers itself through the API and its queries produce results."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from cqlstream.client import Client

CQLSTREAM = str(Path(sys.executable).with_name("cqlstream"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_demo_registers_the_shop_and_streams_results():
    port = _free_port()
    proc = subprocess.Popen(
        [CQLSTREAM, "serve", "--demo", "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(lines) <= 4:  # 4 header lines, then big orders
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        assert lines and lines[0].startswith("demo shop: streams Orders, Clicks, relation Items"), "".join(lines)
        assert len(lines) > 4, "no big order printed within 30 s:\n" + "".join(lines)
        with Client(f"http://127.0.0.1:{port}", timeout=10) as c:
            names = {q["name"]: q["id"] for q in c.queries()}
            assert set(names) == {"big_orders", "sales_last_10s", "clicks_then_orders", "engine_load"}
            snap = list(c.subscribe(names["sales_last_10s"], snapshot=True, follow=False))
            assert snap and all(e.sign == 1 and 1 <= e.row[0] <= 6 for e in snap)
            assert c.entity("src:Orders")["counters"]["accepted"] > 0
        url = f"http://127.0.0.1:{port}"
        text = subprocess.run([CQLSTREAM, "plan", "--url", url], capture_output=True, text=True, timeout=30)
        assert text.returncode == 0 and text.stdout.startswith("Global plan: 4 queries"), text.stderr
        graph = json.loads(
            subprocess.run(
                [CQLSTREAM, "plan", "--url", url, "--json"], capture_output=True, text=True, timeout=30
            ).stdout
        )
        ids = {n["id"] for n in graph["nodes"]}
        assert {"src:Orders", "query:1"} <= ids and all(e["to"] in ids for e in graph["edges"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

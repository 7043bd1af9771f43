"""/metrics shows the write-ahead log when the server has a data dir (and nothing of it without)."""

from __future__ import annotations

import httpx


def test_log_metrics(make_server, tmp_path):
    with_log = make_server(data_dir=str(tmp_path / "d"))
    httpx.post(with_log.url + "/streams", content=b"register stream S (a int)", headers={"content-type": "text/plain"})
    text = httpx.get(with_log.url + "/metrics").text
    lines = {ln.split(" ")[0]: ln.split(" ")[1] for ln in text.splitlines() if ln.startswith("cqlstream_log_")}
    assert int(lines["cqlstream_log_bytes"]) > 0 and lines["cqlstream_log_failed"] == "0"
    assert int(lines["cqlstream_log_next_record"]) >= 2  # the registration is record 1
    without = make_server()
    assert "cqlstream_log_" not in httpx.get(without.url + "/metrics").text

"""A format registered in io/formats.py's tables reaches the server (OpenAPI content types, `format=`
values, Accept negotiation, Content-Type of pushes), the client and the CLI, with nothing else to
edit: toy formats are registered here at test time, exactly as a real one would be."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx
import pytest

from cqlstream.cli import build_parser
from cqlstream.cli import main as cli_main
from cqlstream.client import Client, encode_rows
from cqlstream.engine.batch import Batch
from cqlstream.io.decoders import IngestFormat, NdjsonRows, Parsed, Target
from cqlstream.io.encoders import ResultFormat
from cqlstream.io.formats import INGEST_FORMATS, RESULT_FORMATS, decode


class Tsv(ResultFormat):
    """Toy result format: a header line of column names, then `ts<TAB>sign<TAB>values...` lines."""

    name = "tsv"
    label = "TSV"
    media_type = "text/tab-separated-values"
    aliases = ("text/tsv",)
    openapi: ClassVar[dict[str, Any]] = {"schema": {"type": "string"}, "example": "5\t1\tx\n"}

    def header(self, query_id: int, kind: str, schema: list[tuple[str, str]]) -> bytes:
        return ("ts\tsign\t" + "\t".join(n for n, _ in schema) + "\n").encode()

    def elements(self, b: Batch) -> bytes:
        return "".join(
            f"{ts}\t{sign}\t" + "\t".join("" if v is None else str(v) for v in row) + "\n"
            for ts, sign, row in b.elements()
        ).encode()

    def control(self, event: str, info: dict[str, Any]) -> bytes:
        return f"#{event}\t{info.get('detail', '')}\n".encode()


class KeyValues(IngestFormat):
    """Toy ingest format: one row per line as `key=value` words (`ts=1 A=5 B=x`)."""

    name = "kv"
    label = "key=value"
    media_type = "text/x-kv"

    def decode(self, body: bytes, target: Target) -> Parsed:
        rows = []
        for line in body.decode().splitlines():
            row: dict[str, Any] = dict(w.split("=", 1) for w in line.split())
            rows.append({k: (v if k == "B" else int(v)) for k, v in row.items()})
        return NdjsonRows().decode(NdjsonRows().encode_rows(rows), target)

    def encode_rows(self, rows: Any) -> bytes:
        return "".join(" ".join(f"{k}={v}" for k, v in r.items()) + "\n" for r in rows).encode()


@pytest.fixture
def toy_formats():
    RESULT_FORMATS.register(Tsv())
    INGEST_FORMATS.register(KeyValues())
    try:
        yield
    finally:
        RESULT_FORMATS.unregister("tsv")
        INGEST_FORMATS.unregister("kv")


def test_registry_rejects_clashes_and_undoes_registrations(toy_formats):
    assert RESULT_FORMATS.by_media_type("Text/TSV; charset=utf-8").name == "tsv"
    assert RESULT_FORMATS.from_accept("application/xml;q=0.5, text/tab-separated-values").name == "tsv"
    with pytest.raises(ValueError, match="clashes"):
        RESULT_FORMATS.register(Tsv())
    t = Target("S", "stream", (("A", "int"), ("B", "varchar")), False)
    assert decode(b"ts=1 A=5 B=x\n", "text/x-kv", t).batch().elements() == [(1, 1, (5, "x"))]
    assert encode_rows([{"ts": 1, "A": 5}], "kv") == (b"ts=1 A=5\n", "text/x-kv")


def test_registry_without_the_toys_is_as_shipped():
    assert RESULT_FORMATS.names() == ("ndjson", "json", "sse", "xml")
    assert INGEST_FORMATS.names() == ("json", "ndjson", "csv", "arrow")
    with pytest.raises(ValueError, match="unknown format 'kv'"):
        encode_rows([{"ts": 1}], "kv")


def test_a_registered_format_reaches_the_server_client_and_cli(toy_formats, make_server, capsys):
    srv = make_server()
    spec = httpx.get(srv.url + "/openapi.json").json()
    results = spec["paths"]["/queries/{qid}/results"]["get"]
    assert "text/tab-separated-values" in results["responses"]["200"]["content"]
    (param,) = [p for p in results["parameters"] if p["name"] == "format"]
    assert "tsv" in json.dumps(param["schema"])
    push = spec["paths"]["/streams/{name}/tuples"]["post"]
    assert "text/x-kv" in push["requestBody"]["content"]

    with Client(srv.url) as c:
        c.register_stream("register stream S (A integer, B varchar)")
        qid = c.register_query("select * from S [Range 100]")["id"]
        assert c.push("S", [{"ts": 1, "A": 5, "B": "x"}, {"ts": 2, "A": 6, "B": "y"}], format="kv") == 2
        c.heartbeat("S", 5)
        expected = [tuple(e) for e in c.subscribe(qid, snapshot=True, follow=False)]
        assert sorted(e[2] for e in expected) == [(5, "x"), (6, "y")]
        tsv = b"".join(c.stream_raw(qid, "tsv", snapshot=True, follow=False)).decode()
    lines = [f"{ts}\t{sign}\t{a}\t{b}" for ts, sign, (a, b) in expected]
    assert tsv == "ts\tsign\tA\tB\n" + "".join(line + "\n" for line in lines)

    with srv.client() as http:
        r = http.get(f"/queries/{qid}/results", params={"follow": "false"}, headers={"accept": "text/tsv"})
        assert r.headers["content-type"] == "text/tab-separated-values; charset=utf-8"
        r = http.get(f"/queries/{qid}/results", params={"follow": "false"}, headers={"accept": "image/png"})
        assert r.status_code == 406 and "text/tab-separated-values" in r.json()["detail"]
        r = http.post("/streams/S/tuples", content=b"x", headers={"content-type": "image/png"})
        assert r.status_code == 415 and "text/x-kv" in r.json()["detail"]

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    assert "stream results (NDJSON, JSON, SSE, XML, TSV)" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        parser.parse_args(["query", "--help"])
    assert "one of text, ndjson, json, sse, xml, tsv" in " ".join(capsys.readouterr().out.split())
    assert cli_main(["query", "--id", str(qid), "--url", srv.url, "--format", "tsv"]) == 0
    assert capsys.readouterr().out == tsv

"""POST /queries takes the CQL as JSON `{cql, name}` or as the text body itself (`text/plain`,
name from `?name=`), and both are documented in OpenAPI."""

from __future__ import annotations

import pytest

TEXT = {"content-type": "text/plain"}


@pytest.fixture
def s_stream(http):
    assert http.post("/streams", content="register stream S (A integer)", headers=TEXT).status_code == 201
    return http


def test_text_plain_registers_the_cql_with_its_name_from_the_query_string(s_stream):
    r = s_stream.post("/queries", content="select A from S where A > 1", headers=TEXT, params={"name": "big"})
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["cql"] == "select A from S where A > 1" and out["name"] == "big" and out["kind"] == "stream"
    assert r.headers["location"] == f"/queries/{out['id']}"
    unnamed = s_stream.post(
        "/queries", content="select * from S", headers={"content-type": "text/plain; charset=utf-8"}
    )
    assert unnamed.status_code == 201 and unnamed.json()["name"] is None


@pytest.mark.parametrize(
    ("content", "headers", "status", "code"),
    [
        (b"", TEXT, 422, "invalid_request"),
        (b"selec A from S", TEXT, 422, "syntax"),
        (b"\xff\xfe", TEXT, 400, "malformed_body"),
        (b"<q/>", {"content-type": "application/xml"}, 415, "unsupported_media_type"),
        (b"{not json", {"content-type": "application/json"}, 400, "malformed_body"),
        (b'{"cql": "select * from S", "extra": 1}', {"content-type": "application/json"}, 422, "invalid_request"),
        (b"", {"content-type": "application/json"}, 422, "invalid_request"),
    ],
)
def test_bad_bodies_get_problems(s_stream, content, headers, status, code):
    r = s_stream.post("/queries", content=content, headers=headers)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    if code:
        assert r.json()["code"] == code


def test_bad_name_in_query_string_is_422(s_stream):
    r = s_stream.post("/queries", content="select * from S", headers=TEXT, params={"name": "no spaces"})
    assert r.status_code == 422 and r.json()["field"] == "body.name"


def test_openapi_documents_both_bodies_and_the_name_parameter(http):
    op = http.get("/openapi.json").json()["paths"]["/queries"]["post"]
    content = op["requestBody"]["content"]
    assert set(content) == {"application/json", "text/plain"}
    assert set(content["application/json"]["schema"]["properties"]) == {"cql", "name", "seed_from", "approximate"}
    assert [p["name"] for p in op["parameters"]] == ["name", "seed_from", "approximate"] and "415" in op["responses"]

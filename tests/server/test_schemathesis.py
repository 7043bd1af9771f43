"""Property-based API testing with schemathesis against the server's own OpenAPI document: for every
operation, generated valid and invalid requests get no 5xx and no reply that breaks the spec
(status code, content type, body schema). Bounded: a few examples per operation, under a minute."""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

schemathesis.serializer.alias("application/x-ndjson", "text/plain")
schemathesis.serializer.alias("application/vnd.apache.arrow.stream", "application/octet-stream")

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 40
BUDGET = 50  # seconds for the whole run


@pytest.mark.time_limit(80)
def test_openapi_contract_holds_under_generated_requests(make_server):
    srv = make_server(max_body_bytes=1 << 20)
    with srv.client() as c:  # something to find at the generated paths
        c.post("/streams", content="register stream S (A integer, B varchar)", headers={"content-type": "text/plain"})
        c.post("/streams", json={"name": "R", "kind": "relation", "attrs": [{"name": "A", "type": "integer"}]})
        c.post("/views", json={"name": "V", "query": "select A from S [Range 5]"})
        c.post("/queries", json={"cql": "select * from S"})
        c.post("/queries", json={"cql": "select A, count(*) from S [Range 5] group by A"})
        c.post("/streams/S/tuples", json=[{"ts": 1, "A": 1, "B": "x"}])
    schema = schemathesis.openapi.from_url(srv.url + "/openapi.json")
    ops = [r.ok() for r in schema.get_all_operations()]
    assert len(ops) >= 18, [f"{o.method} {o.path}" for o in ops]
    start = time.monotonic()
    calls = {"n": 0, "statuses": set()}
    failures = []

    for op in ops:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if time.monotonic() - start > BUDGET:
                break

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=op.as_strategy(generation_mode=mode))
            def run(case):
                if case.path.endswith("/results"):  # a result stream does not end by itself
                    case.query = {**(case.query or {}), "follow": "false"}
                resp = case.call(base_url=srv.url, timeout=10)
                calls["n"] += 1
                calls["statuses"].add(resp.status_code)
                case.validate_response(resp, checks=CHECKS)

            try:
                run()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE and not op.path.count("{"), (
                    "only inputs-free operations have no invalid requests"
                )
            except Exception as e:
                failures.append(f"{op.method.upper()} {op.path} ({mode.value}): {e}")

    print(
        f"schemathesis: {calls['n']} requests, statuses {sorted(calls['statuses'])}, {time.monotonic() - start:.1f} s"
    )
    assert not failures, "\n\n".join(failures)
    assert calls["n"] >= 100
    assert not any(s >= 500 for s in calls["statuses"])
    assert srv.host.errors_5xx == 0
    with srv.client() as c:
        assert c.get("/healthz").status_code == 200, "still alive"

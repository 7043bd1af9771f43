"""What the Spark results source asks a cqlstream server before it subscribes: which query an id or a
registered name means, its result kind and output columns. Every request is bounded in time; every
failure is a `ResultsSourceError` naming the server and the query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx


class ResultsSourceError(RuntimeError):
    """The results of a query cannot be read: unknown query, unreachable server, refused subscription,
    or a subscription that ended (query deregistered, subscriber lagged, connection lost)."""


@dataclass(frozen=True)
class QueryInfo:
    """A registered query as the server describes it (`GET /queries/{id}`)."""

    id: int
    name: str | None
    kind: str  # "stream" or "relation"
    columns: tuple[tuple[str, str], ...]  # (name, engine type) of each output column

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> QueryInfo:
        return cls(
            int(doc["id"]),
            doc.get("name"),
            str(doc["kind"]),
            tuple((str(a["name"]), str(a["type"])) for a in doc["schema"]),
        )


def problem_text(r: httpx.Response) -> str:
    """`status code: detail` of an error reply (an RFC 7807 problem document, or the start of its body)."""
    try:
        doc = r.json()
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "detail" in doc:
        return f"{r.status_code} {doc.get('code', 'error')}: {doc['detail']}"
    return f"{r.status_code}: {r.text[:300]}"


def describe_query(client: httpx.Client, url: str, query: str) -> QueryInfo:
    """The query `query` names: an id (digits) is described directly; anything else is looked up by
    name (case-insensitively, as the server compares names) in the list of queries."""
    where = f"query '{query}' at {url}"
    try:
        if query.strip().isdigit():
            r = client.get(f"/queries/{int(query)}")
            if r.status_code == 404:
                raise ResultsSourceError(f"no {where}: the server knows no query with id {int(query)}")
            if r.status_code >= 400:
                raise ResultsSourceError(f"cannot describe {where}: {problem_text(r)}")
            return QueryInfo.from_json(r.json())
        r = client.get("/queries")
        if r.status_code >= 400:
            raise ResultsSourceError(f"cannot list the queries to find {where}: {problem_text(r)}")
        docs = r.json()
    except httpx.HTTPError as e:
        raise ResultsSourceError(f"cannot reach the cqlstream server for {where}: {type(e).__name__}: {e}") from e
    wanted = query.strip().lower()
    for doc in docs:
        if (doc.get("name") or "").lower() == wanted:
            return QueryInfo.from_json(doc)
    names = sorted(str(d["name"]) for d in docs if d.get("name"))
    known = ", ".join(names) if names else "none"
    raise ResultsSourceError(f"no {where}: no registered query has that name (named queries: {known})")

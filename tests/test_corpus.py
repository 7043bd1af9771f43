"""Every CQL query printed in the seed papers, the notes and the issues parses and analyses.

tests/corpus/papers.cql holds the DDL, then one block per query headed by a comment naming its
source line; a `-- expect-error: CODE` line marks a printed query that SQL rules reject.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cqlstream.cql import ast
from cqlstream.cql.catalog import Catalog
from cqlstream.cql.ddl import execute_ddl
from cqlstream.cql.errors import CqlError
from cqlstream.cql.frontend import compile_query
from cqlstream.cql.parser import parse_statement
from cqlstream.cql.types import BOOL

CORPUS = Path(__file__).parent / "corpus" / "papers.cql"


def _blocks():
    """(source comment, expected error code or None, query text) for each query block."""
    text = CORPUS.read_text()
    out, comment, expect, buf = [], None, None, []
    for line in text.splitlines():
        if line.startswith("-- skipped:"):
            break
        if line.startswith("-- expect-error:"):
            expect = line.split(":", 1)[1].split()[0]
        elif line.startswith("--"):
            comment, expect, buf = line[2:].strip(), None, []
        elif comment is not None and line.strip():
            buf.append(line)
            if line.rstrip().endswith(";"):
                out.append((comment, expect, "\n".join(buf)))
                comment, buf = None, []
    return out


def _catalog() -> Catalog:
    cat = Catalog()
    # The thesis' intrusion-detection UDFs (§4.1.1); lookup takes a relation by name.
    cat.functions.register_scalar("lookup", lambda addr, table: True, BOOL, min_args=2, max_args=2)
    cat.functions.register_scalar("match", lambda data, pattern: True, BOOL, min_args=2, max_args=2)
    ddl = CORPUS.read_text().split("\n--", 1)[0]
    execute_ddl(cat, ddl)
    return cat


BLOCKS = _blocks()


def test_corpus_is_substantial():
    assert len(BLOCKS) >= 25
    assert sum(1 for c, _, _ in BLOCKS if c.startswith("seed")) >= 15


@pytest.mark.parametrize("comment,expect,text", BLOCKS, ids=[re.sub(r"\W+", "_", c[:60]) for c, _, _ in BLOCKS])
def test_query_parses_and_analyses(comment, expect, text):
    stmt = parse_statement(text)
    assert isinstance(stmt, ast.Query)
    if expect:
        with pytest.raises(CqlError) as e:
            compile_query(text, _catalog())
        assert e.value.code == expect and e.value.line is not None
        return
    compiled = compile_query(text, _catalog())
    assert compiled.kind in ("stream", "relation")
    assert compiled.schema
    assert "Logical plan:" in compiled.explain()


KINDS = {
    # thesis Ex. 2.1.1 shorthand: a stream; Ex. 2.1.2 windowed join: a relation (thesis §2.1.2)
    "seed 001 (thesis) line 506": "stream",
    "seed 001 (thesis) line 514": "relation",
    "seed 001 (thesis) line 519": "stream",
    "seed 001 (thesis) line 611": "relation",
    "seed 004 (CIDR) line 301": "stream",
}


@pytest.mark.parametrize("prefix,kind", sorted(KINDS.items()))
def test_result_kind(prefix, kind):
    (text,) = [t for c, _, t in BLOCKS if c.startswith(prefix)][:1]
    assert compile_query(text, _catalog()).kind == kind

"""Plan nodes remember their hash (cql/logical/nodes.py `cached_hash`): the planner keys its nodes
by plan, and hashing a deep plan hashed its whole tree on every lookup. The cached value must
behave exactly like the computed one — equal plans hash equal — and never travel in a pickle,
since str hashes differ between processes (a checkpointed planner is keyed by plans)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

from cqlstream.cql import ddl
from cqlstream.cql.analyzer import analyze
from cqlstream.cql.catalog import Catalog
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.parser import parse_query, parse_statement
from cqlstream.engine.synopsis_plan import SynopsisAggregatePlan, SynopsisJoinPlan

QUERY = "select B, Sum(A) from S [Range 10 seconds] where A > 3 group by B"


def _plan(text: str = QUERY) -> L.Plan:
    cat = Catalog()
    ddl.register_source(cat, parse_statement("register stream S (A integer, B integer)"))
    return analyze(parse_query(text), cat).plan


def test_equal_plans_hash_equal_and_the_hash_is_kept():
    a, b = _plan(), _plan()
    assert a is not b and a == b
    assert hash(a) == hash(b)
    assert a.__dict__["_hash"] == hash(a)
    # the second hash is the kept value, not a walk of the tree again
    object.__setattr__(a, "_hash", 12345)
    assert hash(a) == 12345
    assert hash(_plan("select A from S [Rows 3]")) != hash(b)  # different plans (almost surely) differ


def test_every_node_class_caches_its_hash():
    for cls in [*L.Plan.__subclasses__(), SynopsisJoinPlan, SynopsisAggregatePlan]:
        assert cls.__hash__.__qualname__.startswith("cached_hash"), cls


def test_a_pickle_carries_no_hash_and_a_restored_plan_is_found_by_an_equal_one():
    """A plan pickled in a process with another hash seed (a checkpoint written by an earlier
    server) is a dict key an equal plan built here finds."""
    code = (
        "import pickle, sys\n"
        "sys.path[:0] = [p for p in sys.argv[1:]]\n"
        "from tests.test_plan_hash import _plan\n"
        "p = _plan(); hash(p)\n"
        "sys.stdout.buffer.write(pickle.dumps({p: 'state'}))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code, root], capture_output=True, env=env, timeout=120, check=True)
    restored = pickle.loads(out.stdout)
    (key,) = restored
    assert restored.get(_plan()) == "state"
    assert key.__dict__["_hash"] == hash(_plan())  # computed here when the dict was rebuilt
    p = _plan()
    hash(p)
    assert "_hash" not in pickle.loads(pickle.dumps(p)).__dict__

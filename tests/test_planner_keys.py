"""The planner takes its inputs' share keys from the node's own (engine/planner.py `build(skey=...)`).

`share_key(node)` rebuilds the node over its inputs' share keys, so the key of input i is the
key's input i; `_create` passes them down instead of computing each again (on Linear Road's deep
plans every subtree was normalized once per level above it). The physical plan must be the one
built with every key computed afresh: the same nodes under the same keys (field for field), the
same operators, on both Linear Road scripts and the demo script in both modes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.linear_road import gen
from bench.linear_road.bench import SCRIPTS
from cqlstream.engine import planner
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.sharing import share_key
from cqlstream.io.stream_script import Registrar, parse_script

DEMO = Path(__file__).resolve().parents[1] / "demo" / "shop.cql"


def _registered(path: Path, source: Path | None, compat: bool) -> tuple[list[str], str]:
    d = Dsms(compat=compat, recent_tails=False)
    Registrar(parse_script(path, compat=compat, source_dir=source), d, compat).register_all()
    return [repr(k) for k in d.plan.nodes], d.explain_plan()


@pytest.fixture(scope="module")
def lr_source(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("lr_keys")
    gen.write(gen.PRESETS["reference"], source)
    return source


def test_passing_the_inputs_keys_builds_the_same_plan(lr_source: Path, monkeypatch):
    cases = [(p, lr_source, "--stream-compat" in flags) for p, flags in SCRIPTS.values()]
    cases += [(DEMO, None, False), (DEMO, None, True)]
    passed = [_registered(*c) for c in cases]
    create = planner.PhysicalPlan._create

    def afresh(self, node, key, user, share, skey=None):  # every input's key computed again
        return create(self, node, key, user, share, None)

    monkeypatch.setattr(planner.PhysicalPlan, "_create", afresh)
    for case, got in zip(cases, passed):
        assert got == _registered(*case), case[0]


def test_a_share_key_holds_its_inputs_keys(lr_source: Path):
    """What `_create` relies on: share_key(node).inputs[i] equals share_key(node.inputs[i]),
    field for field, on every node of Linear Road's registered queries."""
    for path, flags in SCRIPTS.values():
        compat = "--stream-compat" in flags
        d = Dsms(compat=compat, recent_tails=False)
        Registrar(parse_script(path, compat=compat, source_dir=lr_source), d, compat).register_all()
        seen = 0
        for h in d.queries.values():
            stack = [h.physical_plan]
            while stack:
                n = stack.pop()
                k = share_key(n)
                assert len(k.inputs) == len(n.inputs)
                for ki, i in zip(k.inputs, n.inputs):
                    assert repr(ki) == repr(share_key(i))
                stack.extend(n.inputs)
                seen += 1
        assert seen > 50


def _lift_plain(node):
    """`sharing.lift_filters` as it was (every occurrence of a node walked): the reference."""
    from dataclasses import replace

    from cqlstream.cql.logical import expr as X
    from cqlstream.cql.logical import nodes as L

    kids = tuple(_lift_plain(i) for i in node.inputs)
    if kids != node.inputs:
        node = L.with_inputs(node, kids)
    if isinstance(node, L.Window) and node.spec.time_based and isinstance(node.input, L.Filter):
        inner = node.input
        lifted = L.Filter(replace(node, input=inner.input), inner.predicate)
        return _lift_plain(lifted) if isinstance(inner.input, L.Filter) else lifted
    if isinstance(node, L.Filter) and isinstance(node.input, L.Filter):
        return L.Filter(
            node.input.input, X.conjunction(X.conjuncts(node.input.predicate) + X.conjuncts(node.predicate))
        )
    return node


def test_lifting_filters_once_per_node_gives_the_plain_plans(lr_source: Path):
    """`lift_filters` does each node object once per call (views inlined at several places are
    one object): the same plans, field for field, as walking every occurrence, on the registered
    queries of both Linear Road scripts and the demo script in both modes."""
    from cqlstream.engine.sharing import lift_filters

    cases = [(p, lr_source, "--stream-compat" in flags) for p, flags in SCRIPTS.values()]
    cases += [(DEMO, None, False), (DEMO, None, True)]
    lifted = 0
    for path, source, compat in cases:
        d = Dsms(compat=compat, recent_tails=False)
        Registrar(parse_script(path, compat=compat, source_dir=source), d, compat).register_all()
        for h in d.queries.values():
            got = lift_filters(h.compiled.plan)
            assert repr(got) == repr(_lift_plain(h.compiled.plan))
            lifted += got != h.compiled.plan
    assert lifted > 0  # some selection was lifted above a window


def test_a_view_read_twice_has_its_filter_lifted_at_both_places():
    """A view whose selection sits under its time window, read twice by one query (one node
    object at both places): the second place gets the lifted form too."""
    from cqlstream.engine.sharing import lift_filters

    d = Dsms(recent_tails=False)
    d.execute(
        "register stream S (a int, b int);"
        " register view V as select a, b from S [Range 5] where a > 1;"
        " register view W as select a, b from V where b < 9"
    )
    h = d.register_query("select x.a, y.b from W as x, W as y where x.a = y.a")
    got = lift_filters(h.compiled.plan)
    assert got != h.compiled.plan
    assert repr(got) == repr(_lift_plain(h.compiled.plan))

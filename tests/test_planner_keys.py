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

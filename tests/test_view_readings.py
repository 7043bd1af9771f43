"""A script's views are analyzed once per run (io/stream_script.py `Script.readings`).

`parse_script`'s check analyzes every vquery against a bare catalog; the run's registration into
its Dsms reuses those readings instead of analyzing each view again, which is right only because
its catalog holds the same definitions at every step. These tests register each script both ways
(reusing, and with the readings dropped so every view is analyzed afresh) and compare the
catalogs' view definitions and the registered queries' plans, on both Linear Road scripts (in their
mode) and on the demo script in both modes; and check the readings are not reused where they would not hold
(a catalog that is not empty, the other mode).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.linear_road import gen
from bench.linear_road.bench import SCRIPTS
from cqlstream.engine.dsms import Dsms
from cqlstream.io.stream_script import Registrar, Script, parse_script

DEMO = Path(__file__).resolve().parents[1] / "demo" / "shop.cql"


@pytest.fixture(scope="module")
def lr_source(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("lr_readings")
    gen.write(gen.PRESETS["reference"], source)
    return source


def _cases(lr_source: Path) -> list[tuple[Path, Path | None, bool]]:
    out: list[tuple[Path, Path | None, bool]] = []
    for script_path, flags in SCRIPTS.values():
        out.append((script_path, lr_source, "--stream-compat" in flags))
    return out + [(DEMO, None, False), (DEMO, None, True)]


def _register(script: Script, compat: bool) -> tuple[Dsms, Registrar]:
    d = Dsms(compat=compat, recent_tails=False)
    reg = Registrar(script, d, compat)
    reg.register_all()
    return d, reg


def test_registering_with_the_checks_readings_gives_the_same_catalog_and_plans(lr_source: Path):
    for path, source, compat in _cases(lr_source):
        script = parse_script(path, compat=compat, source_dir=source)
        views = sum(1 for s in script.steps if s.kind == "view")
        assert len(script.readings) == views > 0, path
        reused, reg = _register(script, compat)
        assert reg.reuse
        fresh_script = parse_script(path, compat=compat, source_dir=source)
        fresh_script.readings.clear()
        fresh, _ = _register(fresh_script, compat)
        assert reused.catalog.entries() == fresh.catalog.entries(), path
        assert [q.compiled.plan for q in reused.queries.values()] == [q.compiled.plan for q in fresh.queries.values()]
        assert reused.explain_plan() == fresh.explain_plan(), path  # the operators built


def test_the_readings_are_not_reused_in_the_other_mode_or_into_a_catalog_in_use(lr_source: Path):
    path = next(iter(SCRIPTS.values()))[0]
    script = parse_script(path, compat=True, source_dir=lr_source)
    assert not Registrar(script, Dsms(compat=False), False).reuse
    d = Dsms(compat=True)
    d.register_source("register stream Other (a int)")
    assert not Registrar(script, d, True).reuse
    assert Registrar(script, Dsms(compat=True), True).reuse

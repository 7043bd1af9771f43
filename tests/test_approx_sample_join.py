"""Sampling through joins (cql/approx/sample_join.py), checked statistically on the engine.

A p-sample of a join keeps each result row independently with probability p. For a foreign-key
join (stream ⋈ static relation on the relation's key) the rewrite moves the sample onto the stream:
the sampled rows must still be a uniform p-sample (right rate overall and in every key group). For
a many-to-many join the same push would keep or drop an element's rows together: the number of
rows kept per element is then overdispersed (variance m²·p(1−p) instead of m·p(1−p) for m
partners), which is why the rule refuses it; the test measures that too. Seeds are fixed, the data
bounded, so the test is deterministic.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cqlstream.engine.dsms import Dsms

DDL = (
    "register stream Requests (client int, domain int); "
    "register static relation Domains (domain int, kind int, key (domain)); "
    "register static relation Tags (domain int, tag int);"
)
FK = (
    "select T.client, T.domain from (select S.client, S.domain from Requests S, Domains R "
    "where S.domain = R.domain) T sample(20)"
)
MN = "select T.client, T.tag from (select S.client, R.tag from Requests S, Tags R where S.domain = R.domain) T sample(20)"
MN_PUSHED = "select S.client, R.tag from Requests S sample(20), Tags R where S.domain = R.domain"
P, DOMAINS, TAGS, N = 0.2, 40, 4, 6000
DRAWN = 50  # requests' domains are drawn from 0..DRAWN-1: those ≥ DOMAINS meet no Domains row
CHI2_999_DF39 = 72.05  # the 0.999 quantile of chi-square with 39 degrees of freedom


def requests(seed: int, drawn: int) -> list[tuple[int, int]]:
    return [(i, int(x)) for i, x in enumerate(np.random.default_rng(seed).integers(0, drawn, N))]


def run(seed: int, queries: dict[str, tuple[str, object]], drawn: int = DOMAINS) -> dict[str, list[tuple]]:
    """Each query's result rows over one seeded workload: every request's domain is drawn
    uniformly from 0..drawn-1; domains 0..DOMAINS-1 have one Domains row and TAGS Tags rows."""
    d = Dsms()
    d.execute(DDL)
    handles = {k: d.register_query(q, approximate=a) for k, (q, a) in queries.items()}
    subs = {k: d.subscribe(h.id) for k, h in handles.items()}
    d.push("Domains", [(i, i % 3) for i in range(DOMAINS)], ts=[0] * DOMAINS, signs=[1] * DOMAINS)
    tags = [(i, j) for i in range(DOMAINS) for j in range(TAGS)]
    d.push("Tags", tags, ts=[0] * len(tags), signs=[1] * len(tags))
    rows = requests(seed, drawn)
    ts = [i // 25 for i in range(N)]
    for lo in range(0, N, 1000):
        d.push("Requests", rows[lo : lo + 1000], ts=ts[lo : lo + 1000])
        d.run()
    d.end()
    return {k: list(s.poll().rows()) for k, s in subs.items()}


@pytest.mark.parametrize("seed", [7, 19, 42])
def test_sample_pushed_through_a_foreign_key_join_stays_uniform(seed: int) -> None:
    res = run(seed, {"exact": (FK, None), "pushed": (FK, "static")})
    full = N  # every request meets exactly one domain
    sigma = (P * (1 - P) / full) ** 0.5
    for name, rows in res.items():
        assert abs(len(rows) / full - P) < 4 * sigma, (name, len(rows))
        by_domain = Counter(dom for _, dom in rows)
        sizes = Counter(dom for dom in np.random.default_rng(seed).integers(0, DOMAINS, N).tolist())
        chi2 = sum((by_domain[k] - P * n) ** 2 / (P * n * (1 - P)) for k, n in sizes.items())
        assert chi2 < CHI2_999_DF39, (name, chi2)  # no domain over- or under-sampled
    assert res["pushed"] != res["exact"]  # another sample of the same law, not the same rows
    assert set(res["pushed"]) <= {
        (i, int(x)) for i, x in enumerate(np.random.default_rng(seed).integers(0, DOMAINS, N))
    }


def _dispersion(rows: list[tuple]) -> float:
    """Variance of the rows kept per request over its binomial variance TAGS·p(1−p)."""
    kept = Counter(client for client, _ in rows)
    counts = np.array([kept.get(i, 0) for i in range(N)], dtype=float)
    return float(counts.var() / (TAGS * P * (1 - P)))


@pytest.mark.parametrize("seed", [7, 19])
def test_sampling_one_side_of_a_many_to_many_join_is_correlated(seed: int) -> None:
    res = run(seed, {"exact": (MN, "static"), "naive": (MN_PUSHED, None)})
    assert 0.8 < _dispersion(res["exact"]) < 1.25  # each join row kept independently
    assert _dispersion(res["naive"]) > 3.0  # all TAGS rows of a request kept or dropped together
    for rows in res.values():  # both keep about p of the N·TAGS rows: the marginal rate is not the issue
        assert abs(len(rows) / (N * TAGS) - P) < 0.03


def test_the_rule_applies_to_the_key_join_and_refuses_the_other() -> None:
    d = Dsms()
    d.execute(DDL)
    fk = d.register_query(FK, approximate="static").compiled.approximation
    mn = d.register_query(MN, approximate="static").compiled.approximation
    assert fk is not None and [a.rule for a in fk.applied] == ["sample_join"]
    assert mn is not None and not mn.applied
    assert [r.rule for r in mn.refused] == ["sample_join"] and "not joined on a declared key" in mn.refused[0].reason

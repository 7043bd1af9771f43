"""Settings of A-Caching (thesis §5.5.5–5.6): subresult caches in an MJoin's pipelines.

`enabled`: caches are considered at all (the `caching` knob; off by default, see bench/README.md).
`memory`: bytes of cache memory per join (the `cache_memory` knob), handed to the chosen caches in
order of net benefit per byte.
`interval_seconds` / `interval_tuples`: the re-optimization interval I (whichever comes first;
0 turns one off). The thesis uses I = 2 s, and I = 10,000 tuples for its adaptivity experiment;
a tuple interval makes a run's cache choices independent of timing (tests use it).
`window`: W, the observations averaged per statistic (thesis default 10).
`distinct_window`: W_d, keys per Bloom-filter window when estimating a candidate's miss
probability before it is used; `bloom_bits`: α, bits per key of that filter (≥ 1).
`threshold`: re-run the selection only if a candidate's net benefit moved by more than this
fraction since the last selection (thesis refinement (c), 20 %).
`probe_cost` / `hit_row_cost` / `update_cost`: the cost model's unit costs of a cache lookup per
probing tuple, per cached row returned on a hit, and per row inserted into or removed from a
cache, in the units of a join step (1 per probing row plus 1 per row it produces); used only by
the `costs = "rows"` model.
`costs`: "time" (default) estimates benefit and cost in measured seconds per join call (thesis
§5.5.1's units are time): a segment's steps by their rows and candidate pairs, priced by one
fit to the join's measured step times (step_costs.py), a cache's work (lookups, merges, maintenance, entry creation) as measured while
it is used, or, for a cache not used yet, from the work of the join's used caches (the priors
`prior_call_seconds` + `prior_row_seconds` per probing row until some is measured). "rows": the
step-count model above (deterministic; tests use it to make selections independent of timing).
`candidates_cap`: m of thesis §5.7: when the prefix-invariant candidates of a join are fewer, globally
consistent ones fill the list up to m (0: none; thesis experiments m = 6).
`profile_every`: a profiled candidate takes the keys of one call in this many (the Bloom
filter's miss-rate estimate sees a sample of the calls; 1: every call).
`backoff`: the largest stretch of the re-optimization interval while selections keep the same
caches (engine/adaptive/backoff.py; 1: the thesis' fixed interval, no back-off)."""

from __future__ import annotations

from dataclasses import dataclass

from cqlstream.engine import knobs as K
from cqlstream.engine.adaptive.backoff import cap
from cqlstream.engine.errors import KnobError

BACKOFF = 1  # A-Caching's back-off cap by default: off (the savings are within noise on D1–D8, and a rate burst fires no drift signal; bench/README.md, session 13)


@dataclass(frozen=True)
class CachingConfig:
    """A-Caching's settings (the module docstring says what each field does)."""

    enabled: bool = False
    memory: int = 1 << 20
    interval_seconds: float = 2.0
    interval_tuples: int = 0
    window: int = 10
    distinct_window: int = 64
    bloom_bits: int = 4
    threshold: float = 0.2
    probe_cost: float = 0.5
    hit_row_cost: float = 1.0
    update_cost: float = 1.0
    costs: str = "time"
    prior_call_seconds: float = 2e-4
    prior_row_seconds: float = 2e-6
    profile_every: int = 4
    candidates_cap: int = 6
    backoff: int = BACKOFF


def enabled(v: object) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("on", "off"):
        return v.lower() == "on"
    raise KnobError(f"caching must be on or off (or true/false), got {v!r}")


def memory(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise KnobError(f"cache_memory must be a number of bytes >= 0, got {v!r}")
    return v


def seconds(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise KnobError(f"cache_interval must be seconds >= 0 (0: no time interval), got {v!r}")
    return float(v)


def tuples(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise KnobError(f"cache_interval_tuples must be an integer >= 0 (0: no tuple interval), got {v!r}")
    return v


# the join's knobs of A-Caching (engine/adaptive/caching.py), here so that a join's class can list
# them without loading the caching machinery
CACHING_KNOBS = (
    K.config_field("caching", "caching", "enabled", enabled),
    K.config_field("cache_memory", "caching", "memory", memory),
    K.config_field("cache_interval", "caching", "interval_seconds", seconds),
    K.config_field("cache_interval_tuples", "caching", "interval_tuples", tuples),
    K.config_field("cache_backoff", "caching", "backoff", cap),
)
"""Settings of A-Caching: on/off, the cache memory of the join in bytes, and the
re-optimization interval in seconds and in tuples, and the back-off cap of that interval."""

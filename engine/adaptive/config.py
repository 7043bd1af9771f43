"""Settings of adaptive conjunct ordering: which policy, how often tuples are profiled, how many
profile tuples are kept, and the thrashing-avoidance tolerance α."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cqlstream.engine import knobs as K
from cqlstream.engine.adaptive.cache_config import CachingConfig
from cqlstream.engine.errors import KnobError

OFF = "off"
POLICY_NAMES = ("a-greedy", "sweep", "independent", "local-swaps", OFF)

# The thesis profiles with p = 0.01 (0.005 for Independent). Here a sampled tuple is evaluated
# by every conjunct, which costs p × the whole conjunction per tuple: with cheap selective
# conjuncts before costly ones that weighs most (bench/README.md), so 0.005.
PROBABILITY = 0.005
DEFAULT_PROBABILITY: dict[str, float] = {}
DEFAULT_WINDOW = {"sweep": 500}
BACKOFF = 8  # selections' profiling back-off cap by default (Table 4.2: profile work 1.14 → 0.46 %, re-convergence unchanged; bench/README.md, session 13)


@dataclass(frozen=True)
class AdaptiveConfig:
    """`policy`: one of POLICY_NAMES (`off`: the order only changes by hand).
    `probability`: the chance that a tuple is profiled (None: PROBABILITY).
    `window`: profile tuples kept (None: the policy's default, 1000 mostly).
    `alpha`: a violation counts only when a rank is below α times a later one (≤ 1; 0.9 avoids
    thrashing on noise).
    `profile_batch`: the policy checks its invariant once this many new profile tuples wait.
    `profile_pass`: a selection or join pipeline takes its profile tuples (due at p per input
    tuple) in passes of this many (at most the window), from one call: a pass costs mostly a
    fixed amount (engine/adaptive/profile.py), so fewer, larger passes are cheaper at the same p.
    `cost_model`: a conjunct's cost per tuple is `static` (the vectorized operations it runs per
    tuple, counted from the expression) or `measured` (timed per call, fixed overhead taken out:
    engine/adaptive/profile.py). Timings here are mostly per-call overhead that the order does
    not change, and noisy on a shared machine, so `static` is the default; `measured` suits
    conjuncts calling costly functions.
    `backoff`: the largest stretch of a selection's interval between profiling passes while the
    invariant keeps holding (engine/adaptive/backoff.py; 1: the thesis' fixed pace, no back-off).
    `caching`: A-Caching's settings for joins (engine/adaptive/cache_config.py)."""

    policy: str = "a-greedy"
    probability: float | None = None
    window: int | None = None
    alpha: float = 0.9
    profile_batch: int = 32
    profile_pass: int = 128
    cost_model: str = "static"
    backoff: int = BACKOFF
    caching: CachingConfig = field(default_factory=CachingConfig)

    @property
    def p(self) -> float:
        return self.probability if self.probability is not None else DEFAULT_PROBABILITY.get(self.policy, PROBABILITY)

    @property
    def w(self) -> int:
        return self.window if self.window is not None else DEFAULT_WINDOW.get(self.policy, 1000)


def policy_name(v: object) -> str:
    if v is False:
        return OFF
    if v is True:
        return "a-greedy"
    if isinstance(v, str) and v.lower() in POLICY_NAMES:
        return v.lower()
    raise KnobError(f"adaptive must be one of {', '.join(POLICY_NAMES)} (or true/false), got {v!r}")


def probability(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise KnobError(f"profile_probability must be in (0, 1], got {v!r}")
    return float(v)


def window(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise KnobError(f"profile_window must be a positive integer, got {v!r}")
    return v


def alpha(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise KnobError(f"alpha must be in (0, 1], got {v!r}")
    return float(v)


COST_MODELS = ("static", "measured")


def cost_model(v: object) -> str:
    if v in COST_MODELS:
        return str(v)
    raise KnobError(f"cost_model must be one of {', '.join(COST_MODELS)}, got {v!r}")


def with_policy(c: AdaptiveConfig, v: object) -> AdaptiveConfig:
    return replace(c, policy=policy_name(v))


# the join's knobs of A-Greedy (engine/adaptive/mjoin.py), here so that a join's class can list them
# without loading the adaptive machinery (~0.1 s of imports a run without joins never needs)
MJOIN_KNOBS = (
    K.config_field("adaptive", "adaptive", "policy", policy_name),
    K.config_field("profile_probability", "adaptive", "probability", probability),
    K.config_field("profile_window", "adaptive", "window", window),
    K.config_field("alpha", "adaptive", "alpha", alpha),
)

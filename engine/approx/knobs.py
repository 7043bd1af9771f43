"""The overload controller's engine knobs: `approximation` (off | on), `queue_memory_limit`
(bytes), `cpu_limit` (engine seconds per second), `overload_policy` (a name in
engine/approx/shedding.py POLICIES) and `overload_admission` (on | off: admission control at push
time, engine/approx/admission.py; it acts only while approximation is on). Turning approximation off gives every knob back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cqlstream.engine.approx import config as C
from cqlstream.engine.approx import shedding
from cqlstream.engine.approx.config import OverloadConfig
from cqlstream.engine.errors import KnobError

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms


def configure(d: Dsms, config: OverloadConfig) -> None:
    """Make `config` the engine's; start or stop the controller as it says."""
    from cqlstream.engine.approx.controller import Controller

    if config.policy not in shedding.policy_names():
        raise KnobError(f"overload_policy must be one of {shedding.policy_names()}, got {config.policy!r}")
    d.overload = config
    if config.enabled and d.approx is None:
        d.approx = Controller(d, config)
    elif config.enabled and d.approx is not None:
        d.approx.config = config
    elif d.approx is not None:
        d.approx.release()
        d.approx = None


def _policy(v: object) -> str:
    if not isinstance(v, str) or v not in shedding.policy_names():
        raise KnobError(f"overload_policy must be one of {shedding.policy_names()}, got {v!r}")
    return v


# knob name → (read it from the config, the config with it set)
KNOBS: dict[str, tuple[Callable[[C.OverloadConfig], Any], Callable[[C.OverloadConfig, object], C.OverloadConfig]]] = {
    "approximation": (
        lambda c: "on" if c.enabled else "off",
        lambda c, v: replace(c, enabled=C.switch(v)),
    ),
    "queue_memory_limit": (
        lambda c: c.queue_memory_limit,
        lambda c, v: replace(c, queue_memory_limit=C.queue_memory_limit(v)),
    ),
    "cpu_limit": (lambda c: c.cpu_limit, lambda c, v: replace(c, cpu_limit=C.cpu_limit(v))),
    "overload_policy": (lambda c: c.policy, lambda c, v: replace(c, policy=_policy(v))),
    "overload_admission": (
        lambda c: "on" if c.admission else "off",
        lambda c, v: replace(c, admission=C.switch(v, "overload_admission")),
    ),
}


def values(d: Dsms) -> dict[str, Any]:
    return {name: get(d.overload) for name, (get, _) in KNOBS.items()}


def set_knob(d: Dsms, knob: str, value: object) -> bool:
    """Set one of the controller's engine knobs; False when `knob` is not one of them."""
    entry = KNOBS.get(knob)
    if entry is None:
        return False
    configure(d, entry[1](d.overload, value))
    return True

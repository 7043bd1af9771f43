"""Settings of the overload controller (engine/approx/controller.py): its limits, the ladder of
sampling rates it steps along, and its hysteresis. Plain frozen data, set from engine knobs."""

from __future__ import annotations

from dataclasses import dataclass

from cqlstream.engine.errors import KnobError

# sampling rates a query steps through, from exact to the coarsest the controller goes
LADDER = (1.0, 0.8, 0.6, 0.4, 0.3, 0.2, 0.15, 0.1, 0.07, 0.05, 0.03, 0.02, 0.01)


@dataclass(frozen=True)
class OverloadConfig:
    """When the engine counts as overloaded and how the controller reacts.

    `queue_memory_limit`: bytes held in queues (un-processed input and intermediate results) and
    pending in operators (elements a window holds before they enter it);
    `cpu_limit`: engine seconds per clock second (1.0: the engine is busy all the time).
    None: that resource is not watched. The controller acts at most every `interval` clock
    seconds; after a change it waits `settle` ticks for the change to show before it sheds more,
    and each time cuts the kept input by `decrease` at least (the sum of the queries' rates); it
    gives precision back one step after `calm` ticks in a row under `recover_below` × limit.
    `admission`: refuse rows at push time so that queue memory stays under its limit
    (engine/approx/admission.py) instead of waiting for the next tick to see it grown."""

    enabled: bool = False
    queue_memory_limit: int | None = 100 << 20
    cpu_limit: float | None = None
    interval: float = 0.1
    settle: int = 2
    calm: int = 3
    recover_below: float = 0.5
    decrease: float = 0.2  # one shedding tick cuts the kept input by this fraction at least
    ladder: tuple[float, ...] = LADDER
    policy: str = "weighted"
    admission: bool = True  # refuse rows at push time that would put queue memory over its limit


def switch(v: object, knob: str = "approximation") -> bool:
    """An on/off knob (`approximation`, `overload_admission`)."""
    if v in ("on", True):
        return True
    if v in ("off", False):
        return False
    raise KnobError(f"{knob} must be 'off' or 'on', got {v!r}")


def queue_memory_limit(v: object) -> int | None:
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0):
        return v
    raise KnobError(f"queue_memory_limit must be a positive number of bytes or null, got {v!r}")


def cpu_limit(v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise KnobError(f"cpu_limit must be a positive number (engine seconds per second) or null, got {v!r}")
    return float(v)

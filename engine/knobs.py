"""Settable knobs of control-table entities: each operator and store class declares a table of
`Knob`s (name, how to read it, how to validate and set it); the control API only looks them up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from cqlstream.engine.errors import KnobError


@dataclass(frozen=True)
class Knob:
    """One knob: `get(entity)` reads it, `set(entity, value)` validates (raising KnobError) and sets."""

    name: str
    get: Callable[[Any], Any]
    set: Callable[[Any, Any], None]


def memory_limit(v: object) -> int | None:
    """A memory limit in bytes, or None (no limit)."""
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
        return v
    raise KnobError(f"memory_limit must be a non-negative integer number of bytes or null, got {v!r}")


def cpu_limit(v: object) -> float | None:
    """Seconds of engine time per run, or None (no limit)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise KnobError(f"cpu_limit must be a positive number of seconds or null, got {v!r}")
    return float(v)


def sampling_rate(v: object) -> float:
    """A load-shedding rate in (0, 1]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise KnobError(f"sampling_rate must be in (0, 1], got {v!r}")
    return float(v)


def _set_memory_limit(e: Any, v: object) -> None:
    e.memory_limit = memory_limit(v)


MEMORY_LIMIT = Knob("memory_limit", lambda e: e.memory_limit, _set_memory_limit)


def config_field(name: str, part: str, field: str, check: Callable[[object], Any]) -> Knob:
    """A knob over one field of the frozen `config` of the entity's `part` (its adaptive
    profiler, its caches, ...): setting it validates with `check` and hands the part a new config
    through its `configure`, which decides what restarts."""

    def set_(e: Any, v: object) -> None:
        obj = getattr(e, part)
        obj.configure(replace(obj.config, **{field: check(v)}))

    return Knob(name, lambda e: getattr(getattr(e, part).config, field), set_)


def values(entity: object, knobs: tuple[Knob, ...]) -> dict[str, Any]:
    """The current value of every knob, in table order."""
    return {k.name: k.get(entity) for k in knobs}


def set_one(entity: object, knobs: tuple[Knob, ...], name: str, value: object, what: str) -> None:
    """Set knob `name` of `entity` (described as `what` in the error when there is no such knob)."""
    for k in knobs:
        if k.name == name:
            k.set(entity, value)
            return
    raise KnobError(f"no knob '{name}' on {what}")

"""Entities outside the plan that users steer and watch like plan entities: a Spark source feeding a
stream, for instance. The engine lists their control tables beside its own (`/entities`, `/plan`,
SysStream readers), sets their knobs, and draws an edge from each to the source it feeds; it never
runs them."""

from __future__ import annotations

from typing import Any, Protocol


class Attached(Protocol):
    """What an attached entity gives: an id (`kind:name`, unique), the stream or relation it feeds
    (or None), its control table (`kind`, `name`, `counters`, `knobs`, any other members) and its
    knobs' setter (raise `KnobError` for an unknown knob or a bad value)."""

    @property
    def eid(self) -> str: ...

    @property
    def feeds(self) -> str | None: ...

    def control_table(self) -> dict[str, Any]: ...

    def set_knob(self, knob: str, value: Any) -> None: ...

"""What the user approved at registration: exact (the default) or static approximation, with
optional query-wide tolerances on top of the TOLERATE clauses the query text carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cqlstream.cql.errors import CqlError

MODES = ("exact", "static")


@dataclass(frozen=True)
class ApproxSpec:
    """`mode` exact keeps the plan as written; static applies the approximation rules.
    `window_fraction` f in (0, 1]: any bounded window may shrink to ⌈f·size⌉ where that is safe;
    `sample_percent` p in (0, 100]: a base stream read through a window may be sampled at p%.
    Both apply only where no aggregate sits above (an explicit TOLERATE clause is needed there)."""

    mode: str = "exact"
    window_fraction: float | None = None
    sample_percent: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise CqlError("bad_approximate", f"approximate must be one of {', '.join(MODES)}, not {self.mode!r}")
        f, p = self.window_fraction, self.sample_percent
        if f is not None and not 0 < f <= 1:
            raise CqlError("bad_approximate", f"window_fraction must be in (0, 1], not {f}")
        if p is not None and not 0 < p <= 100:
            raise CqlError("bad_approximate", f"sample_percent must be in (0, 100], not {p}")
        if self.mode == "exact" and (f is not None or p is not None):
            raise CqlError("bad_approximate", "window_fraction and sample_percent need approximate mode 'static'")

    @property
    def static(self) -> bool:
        return self.mode == "static"

    @classmethod
    def parse(cls, value: Any) -> ApproxSpec:
        """From the API's `approximate` field: None, "exact", "static", or an object with `mode`
        (default static), `window_fraction` and `sample_percent`."""
        if value is None:
            return cls()
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, ApproxSpec):
            return value
        if not isinstance(value, dict) or set(value) - {"mode", "window_fraction", "sample_percent"}:
            raise CqlError(
                "bad_approximate", "approximate: 'exact', 'static' or {mode, window_fraction, sample_percent}"
            )
        try:
            num = {k: float(value[k]) for k in ("window_fraction", "sample_percent") if value.get(k) is not None}
        except (TypeError, ValueError):
            raise CqlError("bad_approximate", "window_fraction and sample_percent are numbers") from None
        return cls(str(value.get("mode", "static")), **num)

    def to_json(self) -> str | dict[str, Any]:
        """The inverse of `parse` (what the plan file and the write-ahead log keep)."""
        if self.window_fraction is None and self.sample_percent is None:
            return self.mode
        out: dict[str, Any] = {"mode": self.mode}
        if self.window_fraction is not None:
            out["window_fraction"] = self.window_fraction
        if self.sample_percent is not None:
            out["sample_percent"] = self.sample_percent
        return out

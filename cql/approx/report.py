"""What static approximation did to a plan: each rewrite in force and each refusal with its reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cqlstream.cql.approx.spec import ApproxSpec


@dataclass(frozen=True)
class Applied:
    """A rewrite in force: `rule` turned operator `before` into `after`; `changes_values` is True
    when an aggregate above it sees the change (allowed only by an explicit TOLERATE clause), so the
    result is no longer a subset of the exact one."""

    rule: str
    before: str
    after: str
    why: str
    changes_values: bool = False

    def line(self) -> str:
        return f"{self.rule}: {self.before} → {self.after} ({self.why})"


@dataclass(frozen=True)
class Refused:
    """A tolerated approximation not applied: `at` the operator it concerned, `reason` names the
    operator that forbids it."""

    rule: str
    at: str
    reason: str

    def line(self) -> str:
        return f"{self.rule} refused at {self.at}: {self.reason}"


@dataclass(frozen=True)
class Report:
    """The approved spec, the rewrites in force and the tolerated changes refused."""

    spec: ApproxSpec = field(default_factory=ApproxSpec)
    applied: tuple[Applied, ...] = ()
    refused: tuple[Refused, ...] = ()

    @property
    def approximate(self) -> bool:
        """True when the plan computes something other than the exact query."""
        return bool(self.applied)

    def lines(self) -> list[str]:
        """EXPLAIN's `Approximation:` section."""
        head = f"mode {self.spec.mode}" + ("" if self.applied else ", plan exact")
        return [head] + [a.line() for a in self.applied] + [r.line() for r in self.refused]

    def to_json(self) -> dict[str, Any]:
        """The registration reply's `approximation` object."""
        return {
            "approximate": self.spec.to_json(),
            "exact": not self.applied,
            "applied": [
                {"rule": a.rule, "before": a.before, "after": a.after, "why": a.why, "changes_values": a.changes_values}
                for a in self.applied
            ],
            "refused": [{"rule": r.rule, "at": r.at, "reason": r.reason} for r in self.refused],
        }

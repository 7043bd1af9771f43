"""The shape every static-approximation rule has: look at one node in its context, and either
leave it, rewrite it (with an `Applied` note) or decline a tolerated change (with a `Refused` note)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cqlstream.cql.approx.context import Ctx
from cqlstream.cql.approx.report import Applied, Refused
from cqlstream.cql.approx.spec import ApproxSpec
from cqlstream.cql.logical.nodes import Plan

Keys = Callable[[str], tuple[tuple[str, ...], ...]]  # a relation's declared keys (column names)


def no_keys(name: str) -> tuple[tuple[str, ...], ...]:
    return ()


@dataclass(frozen=True)
class Env:
    """What every rule may read besides the node: the approved spec and the catalog's keys."""

    spec: ApproxSpec
    keys: Keys = field(default=no_keys)


@dataclass(frozen=True)
class Outcome:
    """A rule's answer at one node: the replacement (None: unchanged) and what to report."""

    node: Plan | None = None
    applied: Applied | None = None
    refused: Refused | None = None


Rule = Callable[[Plan, Ctx, Env], Outcome | None]  # None: the rule has nothing to do here

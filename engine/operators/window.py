"""Stream → relation windows (docs/semantics.md): every element gets a lifetime [t_in, t_out).

The window emits `+` at t_in and `−` (same id) at t_out once the bound reaches them. Time windows
know both ends on arrival; Rows and Partition windows learn t_out when the N-th later element
(of the partition) arrives. The operator holds its window's kind (`window`, configuration:
engine/operators/window_kinds.py) and the kind's runtime (`logic`, which owns the buffers:
engine/operators/window_logic.py) and delegates to them; plain Range / Rows windows read their
extent of a shared window store (engine/window_store.py) instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Self

import numpy as np

from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.nodes import Plan, WindowSpec
from cqlstream.engine.batch import Batch
from cqlstream.engine.operators.base import BuildContext, IdSource, Operator
from cqlstream.engine.operators.window_kinds import kind_of
from cqlstream.engine.operators.window_logic import emit, partition_ids
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.planner import EngineOptions
    from cqlstream.engine.synopses import Synopsis
    from cqlstream.engine.window_store import WindowRelation, WindowStore

__all__ = ["WindowOp", "emit", "partition_ids"]


class WindowOp(Operator):
    kind = "seq-window"

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        spec: WindowSpec,
        compat: bool = False,
        options: EngineOptions | None = None,
    ) -> None:
        super().__init__(inputs, output, ids, options)
        self.spec = spec
        self.compat = compat
        self.window = kind_of(spec, compat)  # the kind: configuration
        self.logic = self.window.logic()  # its runtime: the buffers, unused while a store serves it
        self.store: WindowStore | None = None  # shared elements (plain Range / Rows windows)

    def state_bytes(self) -> int:
        return self.logic.state_bytes()  # a shared store counts at plan level

    def pending_bytes(self) -> int:
        return self.logic.pending_bytes()

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        if self.store is not None:
            return self.store.deltas(self, bound)
        return self.logic.process(inputs[0], bound)

    def shared_stores(self) -> list[Synopsis]:
        return [] if self.store is None else [self.store]

    def join_store(self, ws: WindowStore) -> None:
        """Read the window's elements from the shared window store `ws` (see `window_store_mode`);
        joining while data flows, the window starts at the store's position."""
        late = ws.through is not None
        self.store = ws
        ws.join(self)
        if late:
            self.done_through = ws.through
            starts = [m.t0 for m in ws.members if m.t0 is not None]
            self.t0 = min(starts) if starts else ws.through
            self.output.start, self.output.watermark = self.t0, ws.through

    def contents(self) -> Batch | None:
        """The elements in the window after the last processed instant, with their own ts (None
        before the first call, or when the window keeps no state to tell, e.g. Unbounded)."""
        if self.store is not None:
            return self.store.contents(self)
        return self.logic.contents()

    # ------------------------------------------------------------ operator protocol
    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, L.Window)
        return cls(ctx.inputs, ctx.output, ctx.ids, node.spec, compat=ctx.options.compat)

    def snapshot(self, at: int, inputs: Callable[[], list[Batch] | None]) -> Batch | None:
        c = self.contents()
        if c is None or self.done_through is None:
            return None
        n = len(c)
        return Batch(c.cols, c.nulls, np.full(n, self.done_through, np.int64), np.ones(n, np.int8), c.id)

    def snapshotable(self, inputs: Callable[[], bool]) -> bool:
        return self.window.has_state

    def complete_from(self, cf: float) -> float:
        return self.window.complete_from(cf)

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        assert isinstance(node, L.Window)
        c, held = kind_of(node.spec).state_class()
        return c, ([(c, f"window [{node.spec.sql()}]")] if held else [])

    def window_store_mode(self) -> str | None:
        return self.window.store_mode

    def relation_view(self, eid: str) -> WindowRelation | None:
        if self.store is None:
            return None
        from cqlstream.engine.window_store import WindowRelation

        return WindowRelation(self, eid)

    def release(self) -> list[object]:
        freed = super().release()
        ws = self.store
        if ws is not None:
            ws.leave(self)
            if not ws.members:
                ws.release()
                freed.append(ws)
        return freed

    def peek(self, n: int) -> tuple[str, Batch | None]:
        return "window contents", self.contents()

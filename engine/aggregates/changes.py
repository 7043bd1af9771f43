"""What steps 2–6 of an Aggregate operator's batch give (engine/operators/aggregate.py): the
cells, their output values, and which cells change their group's row — before ids are handed
out and rows emitted, so that parts of a batch (disjoint groups, run on separate threads) can
be numbered and merged in the order the whole batch would have emitted them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cqlstream.engine.aggregates.cells import Cells


class Follow:
    """Copies into the positions where `same` holds (a cell whose group is the previous cell's)
    the previous position's value. Where most cells continue their group (many events per
    group) one masked np.copyto per array is fastest; where few do (a window's groups, one cell
    each, or two) the positions found once and a gather and scatter per array are ~3x faster."""

    def __init__(self, same: np.ndarray) -> None:
        self.inner = same[1:]
        k = np.count_nonzero(self.inner)
        self.dense = 4 * k > 3 * len(self.inner)
        if not self.dense:
            self.before = np.flatnonzero(self.inner)
            self.after = self.before + 1

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """dst[i] = src[i − 1] wherever cell i follows a cell of its group."""
        if self.dense:
            np.copyto(dst[1:], src[:-1], where=self.inner)
        else:
            dst[self.after] = src.take(self.before)


@dataclass
class Changes:
    """Cell arrays are in (gid, ts) order; with a probe only the cells that end a probe interval
    (`em`: their numbers among all cells) are compared, and the cell arrays hold just those."""

    cx: Cells  # the batch (or part), prepared, with its per-cell totals
    cell_g: np.ndarray  # group per (compared) cell
    cell_ts: np.ndarray  # instant per (compared) cell
    exists: np.ndarray  # the group has a row after the cell
    prev_exists: np.ndarray  # ... before it
    outs: list[tuple[np.ndarray, np.ndarray]]  # per aggregate: (values, NULL) after each cell
    prevs: list[tuple[np.ndarray, np.ndarray]]  # ... before it
    same: np.ndarray  # the cell's group is the previous cell's
    follow: Follow  # `same`'s copier (its positions found once, for the old ids too)
    em: np.ndarray | None  # probe: the compared cells among all cells (None: cells cut per probe interval)
    rows: np.ndarray  # the ROWS total at every cell (all cells)
    chg: np.ndarray  # cells whose group's row changes (or all cells, with `unchanged` among them)
    del_mask: np.ndarray  # per changed cell: a row existed before (a `−`)
    ins_mask: np.ndarray  # per changed cell: a row exists after (a `+`)
    # when nearly every cell changes, `chg` is all cells (no gathers by it) and these few, whose
    # row stays, are among them with neither mask set (they emit nothing); else None
    unchanged: np.ndarray | None = None

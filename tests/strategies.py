"""Hypothesis strategies shared by the engine tests."""

from __future__ import annotations

from hypothesis import strategies as st

small = st.one_of(st.integers(0, 2), st.just(None))


@st.composite
def relation_events(draw, n=8, first=small, second=small):
    """Bag updates `(ts, sign, (first, second))` with duplicates, NULLs, deletes in any order, and
    deletes re-inserted at the same instant."""
    events, live, t = [], [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, n))):
        t += draw(st.sampled_from([0, 0, 1, 2, 3]))
        if live and draw(st.booleans()):
            row = live.pop(draw(st.integers(0, len(live) - 1)))
            events.append((t, -1, row))
            if draw(st.integers(0, 3)) == 0:
                live.append(row)
                events.append((t, +1, row))  # deleted and re-inserted at one instant
        else:
            row = (draw(first), draw(second))
            live.append(row)
            events.append((t, +1, row))
    return events


@st.composite
def stream_events(draw, n=9, first=small, width=2):
    """Stream elements `(ts, row)` with ties, gaps and occasional heartbeats `(ts, None)`; the
    row's first value is drawn from `first`, the others from `small`."""
    events, t = [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, n))):
        t += draw(st.sampled_from([0, 0, 1, 1, 2, 4]))
        if draw(st.integers(0, 9)) == 0:
            events.append((t, None))  # heartbeat
        else:
            events.append((t, (draw(first),) + tuple(draw(small) for _ in range(width - 1))))
    return events

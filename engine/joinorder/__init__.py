"""Sliding-window multi-join ordering (Golab & Özsu): the per-unit-time cost model (`cost`), the
join-order heuristic (`heuristic`), the plan-time estimates of a join's inputs (`estimates`), the
probe orders an MJoin starts with and their run-time re-evaluation (`ordering`), and a model of
eager, lazy and naive-lazy expiration (`expiration`) that shows why timestamp checks are needed."""

"""Result text made from a change record (io/change_text.py): a grouped aggregate's `−`/`+` row
pairs formatted from the record (instant and key once per cell) must be the bytes of the laid-out
rows' text, whatever the chunk boundaries, NULLs, groups appearing or emptied (a pair with one
line), cells with no line, sparse instants, projections, and fields too wide for the word path
(those chunks go the usual way). `cqlstream run` writes the same bytes at 1 and 2 threads as with
the rows laid out at once, for relations with updates, streams, empty instants, NULLs, text keys,
floats and booleans. The small-integer text table equals numpy's own conversion. A batch whose
rows were replaced no longer offers its record, rows already laid out (by a producer helping a
writer that is behind) are formatted as they are, and an error formatting from a record on the
writer thread is the run's error, with no thread left behind.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from cqlstream.engine.batch import Batch
from cqlstream.engine.deferred_batch import ChangeRows, DeferredBatch, change_batch
from cqlstream.engine.operators import aggregate as agg_mod
from cqlstream.io import change_text, stream_text
from cqlstream.io.script_runner import run_script
from cqlstream.io.stream_text import format_output
from tests.test_deferred_batch import assert_run_fails, relation_updates, write_script


def _record(
    n: int,
    seed: int,
    *,
    both: float = 0.7,
    null: float = 0.2,
    span: int = 40,
    big: bool = False,
    key_dtype: type = np.int64,
) -> ChangeRows:
    """k cells of a 2-column key (the second with NULLs) and two value columns (int with NULLs,
    bool); a share `both` of the cells have a `−` and a `+` line, the others one of them (a few
    neither). `big`: some values of 9+ characters (the word path declines those chunks)."""
    rng = np.random.default_rng(seed)
    m = 3 * n  # the operator's value arrays cover more cells than the changed ones
    kind = rng.random(n)
    dels = kind < both + (1 - both) / 2
    ins = (kind < both) | (kind >= both + (1 - both) / 2)
    dels[rng.random(n) < 0.02] = False
    ins[~dels & (rng.random(n) < 0.5)] = False  # a few cells with no line at all
    hi = 10**10 if big else 70_000
    iv = rng.integers(-hi, hi, m)
    if big:
        iv[rng.random(m) < 0.9] %= 1000  # mostly narrow: chunks of both kinds
    keys = [rng.integers(-5, 120, n).astype(key_dtype), rng.integers(0, 3, n).astype(key_dtype)]
    return ChangeRows(
        ts=rng.integers(0, span, n),
        tmin=1_000,
        tmax=1_000 + span - 1,
        dels=dels,
        ins=ins,
        keys=keys,
        key_nulls=[None, rng.random(n) < null],
        cell=rng.permutation(m)[:n],
        old=[(iv, rng.random(m) < null), (rng.random(m) < 0.5, np.zeros(m, bool))],
        new=[(iv[::-1] + 7, rng.random(m) < null), (rng.random(m) < 0.5, rng.random(m) < null)],
        old_id=np.arange(n, dtype=np.uint64),
        new_id=np.arange(n, dtype=np.uint64) + 10_000,
    )


def _laid_out(b: Batch) -> Batch:
    """The same rows as a plain batch (the usual formatting path)."""
    return Batch(list(b.cols), list(b.nulls), b.ts, b.sign, b.id)


@pytest.mark.parametrize("chunk", [2, 7, 64, 1 << 16])
@pytest.mark.parametrize(
    ("n", "seed", "opts"),
    [
        (1, 1, {}),
        (300, 2, {}),
        (300, 3, {"both": 1.0, "null": 0.0}),
        (300, 4, {"both": 0.0}),
        (500, 5, {"big": True}),
        (300, 6, {"span": 5 * 10**6}),  # sparse instants
        (300, 6, {"span": 10**9}),  # timestamps of 9+ characters: the usual way
        (300, 7, {"key_dtype": np.int32}),
    ],
)
def test_text_from_the_record_is_the_rows_text(monkeypatch, chunk, n, seed, opts):
    monkeypatch.setattr(stream_text, "_CHUNK", chunk)
    monkeypatch.setattr(change_text, "_CHUNK", chunk)
    rec = _record(n, seed, **opts)
    for picks in (None, [3, 0, 2, 1], [1, 1]):  # a projection may reorder and repeat columns
        b = change_batch(rec)
        b = b if picks is None else b.project(picks)
        assert isinstance(b, DeferredBatch) and b.change_view() is not None
        got = format_output(b)
        if not opts.get("big") and opts.get("span", 0) < 10**7:
            assert not b.built  # made from the record, not from laid-out rows
        assert got == format_output(_laid_out(change_batch(rec) if picks is None else change_batch(rec).project(picks)))
        with_writer = b"".join(stream_text.format_chunks(b, nogil=True))
        assert with_writer == got


def test_a_record_made_only_of_wide_fields_goes_the_usual_way():
    rec = _record(50, 8)
    rec = dataclasses.replace(rec, new=[(rec.new[0][0] * 0.5, rec.new[0][1]), rec.new[1]])  # a float column
    b = change_batch(rec)
    assert format_output(b) == format_output(_laid_out(change_batch(rec)))


def test_replaced_rows_or_instants_withdraw_the_record():
    rec = _record(40, 9)
    b = change_batch(rec)
    b.cols = [c.copy() for c in b.cols]
    b.cols[0][:] = 99
    assert b.change_view() is None
    assert format_output(b).count(b":99, ") == len(b)
    b2 = change_batch(rec)
    b2.ts = b2.ts + 1
    assert b2.change_view() is None and format_output(b2) == format_output(_laid_out(b2))
    assert change_batch(rec).slice(0, 5).change_view() is None  # a slice: its rows, the usual way
    b3 = change_batch(rec)
    p = b3.project([1, 0])
    b3.sign = -b3.sign  # the projection's rows are read from these
    assert p.change_view() is None and format_output(p) == format_output(_laid_out(p))


def test_rows_laid_out_by_a_producer_are_formatted_as_they_are(monkeypatch):
    """A producer lays the rows out when the writer is behind, to take a share of its work: the
    writer then formats those rows, not the record again."""
    rec = _record(60, 10)
    b = change_batch(rec)
    want = format_output(_laid_out(change_batch(rec)))

    def unused(*a, **k):
        raise AssertionError("formatted from the record")

    monkeypatch.setattr(change_text, "pairs_text", unused)
    b.build()
    assert format_output(b) == want


def test_small_integer_table_is_numpys_text():
    monkey = stream_text._small_words
    try:
        stream_text._small_words = None
        table = stream_text._small_table()
    finally:
        stream_text._small_words = monkey
    want = np.arange(-(1 << 16), 1 << 16, dtype=np.int64).astype("S8").view(np.dtype("<u8"))
    assert np.array_equal(table, want)
    for n in (1, 10, 11, 100_001):
        assert np.array_equal(stream_text._left_words(n), np.arange(n).astype("S8").view(np.dtype("<u8")))


def _script(tmp_path: Path) -> tuple[Path, list[str]]:
    """Aggregates whose results are change records over: a stream with empty instants, NULL keys
    and values (a view dividing by zero), text keys, floats and booleans; a relation with updates;
    a stream query (Istream) beside them."""
    rng = np.random.default_rng(5)
    n = 3000
    ts = np.sort(rng.integers(1, n // 3, n)) * 2  # even instants only: the odd ones are empty
    words = ["a", "bb", "", "ccc"]
    s = [
        f"{t},{int(rng.integers(-40, 60))},{int(rng.integers(0, 25))},{rng.integers(-8, 8) / 4},{words[int(rng.integers(0, 4))]}"
        for t in ts
    ]
    r = relation_updates(rng, n, 20, low=-20)
    (tmp_path / "s.dat").write_text("i,i,i,f,c4\n" + "\n".join(s) + "\n")
    (tmp_path / "r.dat").write_text("i,b,i,i\n" + "\n".join(r) + "\n")
    queries = [
        "select B, Sum(A), Count(A) from S [Rows 50] group by B",
        "select C, Count(*), Min(A), Max(F) from S [Range 8] group by C",  # a text key, a float
        "select B, Sum(A), Count(A) from V [Range 6] group by B",  # NULL keys and values
        "select A, Count(*), Sum(B) from R group by A",  # a relation with updates
        "select B, Count(*) from S [Range 5] group by B having Count(*) > 2",
        "Istream(select B, Sum(A) from S [Range 4] group by B)",  # a stream
        "select B, Count(*) > 3, Sum(A) from S [Range 3] group by B",  # a boolean column
        "select Count(*), Min(A) from V [Range 3]",  # no key
    ]
    lines = [
        "table : register stream S (A integer, B integer, F float, C char(4));",
        "source : s.dat",
        "table : register relation R (A integer, B integer);",
        "source : r.dat",
        "vquery : select case when A > 45 then A / 0 else A end as A, case when B > 20 then B / 0 else B end as B from S;",
        "vtable : register stream V (A integer, B integer);",
    ]
    return write_script(tmp_path, lines, queries)


@pytest.mark.parametrize("batch_rows", [1, 7, None])
def test_run_writes_the_laid_out_rows_bytes_at_every_thread_count(batch_rows, tmp_path, monkeypatch):
    script, dests = _script(tmp_path)
    kw = {} if batch_rows is None else {"batch_rows": batch_rows}
    used = []
    real = change_text.pairs_text

    def counted(*a, **k):
        used.append(1)
        return real(*a, **k)

    monkeypatch.setattr(change_text, "pairs_text", counted)
    got = {}
    for t in (1, 2):
        run_script(script, out_dir=tmp_path / f"t{t}", threads=t, **kw)
        got[t] = [(tmp_path / f"t{t}" / d).read_bytes() for d in dests]
    assert used  # the record path ran
    with monkeypatch.context() as mp:  # the rows laid out at once, formatted the usual way
        mp.setattr(agg_mod, "change_batch", lambda rec: _laid_out(change_batch(rec)))
        run_script(script, out_dir=tmp_path / "eager", threads=1, **kw)
    eager = [(tmp_path / "eager" / d).read_bytes() for d in dests]
    assert all(eager) and b"null" in eager[2] and b"true" in eager[6] and b"-" in eager[3]
    assert got[1] == eager and got[2] == eager


@pytest.mark.parametrize("threads", [1, 2])
def test_an_error_formatting_from_a_record_is_the_runs_error(threads, tmp_path, monkeypatch):
    script, _ = _script(tmp_path)

    def broken(*a, **k):
        raise MemoryError("formatting the pairs")

    monkeypatch.setattr(change_text, "pairs_text", broken)
    assert_run_fails(script, tmp_path / "out", threads, "formatting the pairs")

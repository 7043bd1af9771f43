"""bench/scale_out.py's single-process side on a few thousand rows (its Spark side runs in the bench
only): the engine answers something, and a bucket's state serializes."""

from __future__ import annotations

from bench import scale_out


def test_single_process_side_of_the_scale_out_bench(tmp_path):
    scale_out.write_data(tmp_path, rows=2000, files=4, keys=20, instants=200)
    for name, query in scale_out.QUERIES.items():
        r = scale_out.single_process(tmp_path, query, scale_out.STREAMS[name])
        assert r["rows"] == 2000 * len(scale_out.STREAMS[name])
        assert r["output_rows"] > 0 and r["state_bytes"] > 0 and r["serde_seconds_per_batch"] > 0

"""The Linear Road workload: STREAM 0.6's Linear Road script (`linearroad.cql`, byte for byte),
a seeded generator of its four input streams (`gen.py`), and the benchmark that runs the script
with `cqlstream run` (`python -m bench.linear_road`)."""

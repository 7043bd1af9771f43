"""`python -m bench.linear_road`: the Linear Road benchmark (bench/linear_road/bench.py)."""

from bench.linear_road.bench import main

raise SystemExit(main())

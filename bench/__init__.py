"""Benchmarks: data generators, per-operator-family throughput, and STREAM comparison queries."""

"""Approximation: answering queries with less precision when resources run short."""

"""Spark Structured Streaming sources feeding engine streams (not built yet: the package only reserves the name)."""

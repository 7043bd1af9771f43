"""Spark Structured Streaming sources feeding engine streams — built in the Spark bridge issue."""

"""Physical operators over delta batches, one family per module."""

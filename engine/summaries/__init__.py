"""Summary synopses: bounded-memory stand-ins for exact state (samples, histograms, sketches, filters)."""

"""Input and output outside the engine: STREAM scripts, `.dat` source files, STREAM's result text,
and the registries of HTTP ingest decoders and result encoders.

The engine sees only typed `Batch`es; everything that turns bytes into batches or batches into
bytes lives here, so a new format or source plugs in without touching the engine.
"""

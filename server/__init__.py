"""HTTP layer (FastAPI): the API over the `Dsms` facade, result encoders, ingest parsers, metrics.

`cqlstream.server.app.create_app(dsms_or_settings)` builds the app; `cqlstream serve` runs it with uvicorn.
"""

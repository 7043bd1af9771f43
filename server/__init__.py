"""HTTP layer (FastAPI): the API over the `Dsms` facade (formats come from cqlstream.io.formats), metrics.

`cqlstream.server.app.create_app(dsms_or_settings)` builds the app; `cqlstream serve` runs it with uvicorn.
"""

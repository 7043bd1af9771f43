"""HTTP layer (FastAPI): API, result encoders, catalog persistence, web UI — built in the server issue."""

"""Package data of the web console: static/ (HTML, CSS, ES modules) and vendor/ (ReDoc, with its license)."""

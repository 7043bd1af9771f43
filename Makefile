# Set-up and jobs; README's two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint typecheck java browser bench clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP) java browser

java:
	@scripts/check_java.sh || echo "(continuing: Java is needed for Spark: make demo and the Spark tests; without it: cqlstream serve --demo --no-spark)"

browser:
	@scripts/install_browser.sh || echo "(continuing: Chromium is only needed for the console's browser tests)"

demo: setup
	$(VENV)/bin/cqlstream serve --demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy over the installed shape of the tree (cqlstream.cql, cqlstream.engine, ...)
typecheck: setup
	$(PY) scripts/typecheck.py

test: setup lint typecheck
	$(PY) -m pytest

clean:
	rm -rf $(VENV) build *.egg-info

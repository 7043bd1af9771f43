# Set-up and jobs; README's two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup bytecode demo test lint typecheck java browser bench clean

# Each step says what it does first: the install fetches about 0.5 GB (pyspark) on a first run.
$(STAMP): pyproject.toml setup.py
	@echo "==> [setup 1/3] creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> [setup 2/3] upgrading pip"
	$(PY) -m pip install -q --upgrade pip
	@echo "==> [setup 3/3] installing cqlstream and its dependencies (first run: about 0.5 GB, a few minutes)"
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)
	@echo "==> installed: run commands as $(VENV)/bin/cqlstream ..., or activate the venv: . $(VENV)/bin/activate"

setup: $(STAMP) bytecode java browser

# The tree's .pyc files, written in place: an install has them (pip writes them), but where
# PYTHONDONTWRITEBYTECODE is set an editable checkout would compile every module at every start
# (~0.2 s a process). Up-to-date files are skipped, so this costs ~0.1 s once done.
bytecode: $(STAMP)
	@echo "==> byte-compiling the tree (.pyc, as an install has them)"
	@$(PY) -m bench.bytecode

java:
	@echo "==> checking for Java (Spark)"
	@scripts/check_java.sh || echo "(continuing: Java is needed for Spark: make demo and the Spark tests; without it: cqlstream serve --demo --no-spark)"

browser:
	@echo "==> checking for Chromium (the console's browser tests)"
	@scripts/install_browser.sh || echo "(continuing: Chromium is only needed for the console's browser tests)"

demo: setup
	@echo "==> serving the demo shop on http://127.0.0.1:8000 (Ctrl-C stops)"
	$(VENV)/bin/cqlstream serve --demo

lint: setup
	@echo "==> lint (ruff)"
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy over the installed shape of the tree (cqlstream.cql, cqlstream.engine, ...)
typecheck: setup
	@echo "==> typecheck (mypy)"
	$(PY) scripts/typecheck.py

test: setup lint typecheck
	@echo "==> tests (pytest)"
	$(PY) -m pytest --durations=25

clean:
	rm -rf $(VENV) build *.egg-info

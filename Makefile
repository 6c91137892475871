# Two commands set everything up: `make demo` and `make test`. Each builds .venv here first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test docs lint bench clean gpu-bundle

$(STAMP): pyproject.toml requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c requirements/constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c requirements/constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/raycache demo

# The suite on two pytest workers (pytest-xdist), each file on one of them (its module fixtures
# built once): most tests wait on Ray, subprocesses and sockets, so two share two cores well.
# `make test WORKERS=0` runs it in this process, one test at a time.
WORKERS ?= 2

test: $(STAMP)
	$(BIN)/ruff check raycache jobs tests bench
	$(BIN)/python -m pytest $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadfile)

DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install -q -c requirements/constraints.txt -e '.[docs]'
	touch $(DOCS_STAMP)

# The manual: docs/ built into site/ (ignored), failing on any warning (a broken link, a missing name).
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(BIN)/python bench/cache_vs_live.py

# What a GPU machine with no network lacks, in .gpu/ (ignored), for bench/gpu/run.py there.
gpu-bundle: $(STAMP)
	PYTHON=$(BIN)/python bash bench/gpu/bundle.sh

clean:
	rm -rf $(VENV) .raycache site

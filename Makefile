# Two commands set everything up: `make demo` and `make test`. Each builds .venv here first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c requirements/constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c requirements/constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/raycache demo

test: $(STAMP)
	$(BIN)/ruff check raycache jobs tests bench
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/cache_vs_live.py

clean:
	rm -rf $(VENV) .raycache

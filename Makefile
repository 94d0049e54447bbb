# llm-autoscaler: set-up and everyday commands. `make demo` and `make test` work on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck unit bench mutation system-deps clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# System services the integration tests use for real (Prometheus server, headless Chromium).
system-deps:
	bash scripts/system-deps.sh

demo: install
	$(BIN)/llm-autoscaler demo

lint: install
	$(BIN)/ruff check autoscaler tests benchmarks
	$(BIN)/ruff format --check autoscaler tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: install
	$(BIN)/pytest -q -rs

test: install system-deps lint unit

bench: install
	$(BIN)/python benchmarks/run_all.py

# Mutation testing of the decision core and the engine adapters (not part of `make test`;
# ~25 min on 2 busy cores). Scope and tests: [tool.mutmut] in pyproject.toml; the score and
# every surviving mutant, argued equivalent or listed, are in docs/testing.md.
mutation: install
	rm -rf mutants
	nice -n 10 $(BIN)/mutmut run --max-children 2
	$(BIN)/mutmut results

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache mutants

# autoexp — the two commands that matter: `make demo` (the main job) and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin

.PHONY: bootstrap demo test lint typecheck unit bench clean

bootstrap:
	./scripts/bootstrap

## The main job: the demo campaign on the local Slurm cluster through a real Airflow.
demo: bootstrap
	./scripts/demo

## Everything CI checks: ruff, mypy (strict on our packages), the whole pytest suite
## (which brings up its own local Slurm cluster and Airflow home).
test: bootstrap lint typecheck
	$(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder --durations=25

lint:
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff format --check src plugins include dags tests bench scripts

typecheck:
	$(BIN)/mypy

bench: bootstrap
	for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf .state out .mypy_cache .ruff_cache .pytest_cache

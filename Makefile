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
## (which brings up its own local Slurm cluster and Airflow home) on the development venv's Airflow,
## and after it scripts/check-airflow-matrix (the older Airflow versions; its output in .state/matrix.log).
## After, not beside: its unit tests on a machine the suite keeps at load 15 lost rounds to timing.
test: bootstrap lint typecheck
	@mkdir -p .state; $(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder --durations=25; suite=$$?; \
	if scripts/check-airflow-matrix >.state/matrix.log 2>&1; then grep '^check-airflow-matrix:' .state/matrix.log; \
	else tail -n 80 .state/matrix.log; echo "make test: scripts/check-airflow-matrix failed (.state/matrix.log)"; exit 1; fi; \
	exit $$suite

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

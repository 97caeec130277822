# autoexp — the two commands that matter: `make demo` (the main job) and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin

.PHONY: bootstrap demo test matrix lint typecheck bench clean

bootstrap:
	./scripts/bootstrap

## The main job: the demo campaign on the local Slurm cluster through a real Airflow.
demo: bootstrap
	./scripts/demo

## Everything CI checks: ruff, import-linter, mypy (strict on our packages) and the whole pytest suite
## (which brings up its own local Slurm cluster and Airflow home) on the development venv's Airflow;
## the suite runs scripts/check-airflow-matrix too (the older Airflow versions:
## tests/scripts/test_check_airflow_matrix.py, its output in .state/matrix.log). The static checks run
## beside the suite (each is one process; the suite's first minute starts stacks and clusters, with
## CPU to spare), their output printed after it; either failing fails the target. The matrix's venvs are
## built beside scripts/bootstrap (pip keeps one core busy there): the matrix test finds them warm, and
## builds again a row whose build failed there (its log: .state/matrix-venvs.log). Plain `make`, not
## $(MAKE): make runs a line that names $(MAKE) even under `make -n`, and this line holds the suite.
test:
	@mkdir -p .state; scripts/check-airflow-matrix --venvs >.state/matrix-venvs.log 2>&1 & venvs=$$!; \
	./scripts/bootstrap || { kill $$venvs; exit 1; }; \
	make --no-print-directory lint typecheck >.state/static.log 2>&1 & static=$$!; \
	$(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder --durations=25; suite=$$?; \
	wait $$venvs; wait $$static; checks=$$?; cat .state/static.log; \
	if [ $$checks -ne 0 ]; then echo "make test: ruff, import-linter or mypy failed (above)"; exit $$checks; fi; \
	exit $$suite

## The older Airflow versions alone (what `make test` runs inside the suite).
matrix:
	scripts/check-airflow-matrix

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

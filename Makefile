# crossfeed — every target installs what it needs first (idempotent, cached).
# `make help` lists them.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
TEST_WORKERS ?= 3

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  make %-8s %s\n", $$1, $$2}'

.PHONY: setup
setup: ## install PostgreSQL binaries, .venv (pinned) and the Kafka/Spark jars
	@bash deploy/local/setup.sh

.PHONY: up
up: setup ## start the local stack: dc-a :19092, dc-b :29092, PostgreSQL :25432
	@$(BIN)/crossfeed local up

.PHONY: down
down: ## stop the local stack (leaves no process behind)
	@if [ -x $(BIN)/crossfeed ]; then $(BIN)/crossfeed local down; fi

.PHONY: status
status: setup ## what runs where
	@$(BIN)/crossfeed local status

.PHONY: demo
demo: setup ## the main job: replicate dc-a -> dc-b, lose dc-a, fail consumers over; then an ordered feed into PostgreSQL; then PostgreSQL captured by Debezium; then two databases both writing; then a database feed across a lost data center and back
	@$(BIN)/crossfeed demo && $(BIN)/crossfeed demo --ordered && $(BIN)/crossfeed demo --cdc && $(BIN)/crossfeed demo --active-active && $(BIN)/crossfeed demo --dr

.PHONY: lint
lint: setup ## ruff, mypy (strict for the crossfeed package) and the import layers (pyproject.toml)
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .
	@$(BIN)/mypy crossfeed
	@$(BIN)/lint-imports --no-cache

.PHONY: test
test: setup lint ## lint, then unit and integration tests against real brokers
	@CROSSFEED_KAFKA_JVM_OPTIONS="$${CROSSFEED_KAFKA_JVM_OPTIONS--XX:TieredStopAtLevel=1}" \
	  $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

.PHONY: unit
unit: setup ## unit tests only (no brokers)
	@$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

.PHONY: bench
bench: setup ## benchmarks vs MirrorMaker 2, dc-b's ceiling, Spark and PostgreSQL (~60-75 min; BENCH_ARGS=--quick), then make slow
	@$(BIN)/crossfeed bench $(BENCH_ARGS)
	@$(MAKE) --no-print-directory slow

.PHONY: slow
slow: setup ## limit checks too long for make test: 1,000,000-event transactions, sink apply rates, the sorter on a standalone Spark cluster
	@$(BIN)/python -m pytest -m slow -s $(PYTEST_ARGS)

.PHONY: docs
docs: setup ## regenerate the settings reference in docs/configuration.md from crossfeed/config/settings.py
	@$(BIN)/crossfeed settings --write docs/configuration.md

.PHONY: clean
clean: down ## stop the stack and delete its data (.crossfeed/, keeps the jar cache)
	@rm -rf .crossfeed/dc-a .crossfeed/dc-b .crossfeed/postgres .crossfeed/local.yaml

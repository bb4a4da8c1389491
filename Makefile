# engram — `make run` sets up and starts everything; `make test` sets up and runs the suite.
# Every target installs what is missing first, and is safe to run again.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ENV_FILE := .local/engram.env
# Load the local cluster's connection settings (written by scripts/pg.sh) into a recipe.
WITH_ENV := set -a && . ./$(ENV_FILE) && set +a &&

.PHONY: help install venv postgres pgbouncer model model-mpnet model-e5 db migrate run stop test compat lint format browser node-client promtool docs

help:
	@echo "make run    install what is missing, start Postgres, migrate, serve on 127.0.0.1:8000"
	@echo "make test   install what is missing, start Postgres, run the test suite"
	@echo "make compat install the agent frameworks' pinned Mem0 integrations, run them against engram"
	@echo "make lint   ruff, mypy and the migrations check"
	@echo "make stop   stop what make run started (server and Postgres)"
	@echo "make docs   build the documentation site into site/ (MkDocs, --strict, offline)"

install: venv postgres model

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) is required (Python 3.11)"; exit 1; }
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

postgres:
	@bash scripts/install-postgres.sh

# Debian's PgBouncer (>= 1.21), which tests/config/test_pgbouncer.py runs the API and worker
# through in transaction mode (scripts/pgbouncer.sh starts a project-local one).
pgbouncer: postgres
	@bash scripts/install-pgbouncer.sh

# The local embedding model ENGRAM_LOCAL_MODEL names (all-MiniLM-L6-v2 unless it says otherwise).
LOCAL_MODEL := $(or $(ENGRAM_LOCAL_MODEL),all-MiniLM-L6-v2)
MODEL_DIR := $(or $(ENGRAM_MODEL_DIR),$(HOME)/.cache/engram/models/$(LOCAL_MODEL))

model: venv
	@bash scripts/export-model.sh $(LOCAL_MODEL)
	@$(BIN)/python scripts/embed_vocabulary.py "$(MODEL_DIR)" $(LOCAL_MODEL)

# all-mpnet-base-v2 beside the configured model (where a deployment switched to it looks for it),
# which the test suite runs too (tests/memory/test_local_models.py).
model-mpnet: venv
	@ENGRAM_MODEL_DIR="$(dir $(MODEL_DIR))all-mpnet-base-v2" bash scripts/export-model.sh all-mpnet-base-v2
	@$(BIN)/python scripts/embed_vocabulary.py "$(dir $(MODEL_DIR))all-mpnet-base-v2" all-mpnet-base-v2

# multilingual-e5-small beside the configured model, which the test suite runs too
# (tests/memory/test_local_models.py, tests/memory/test_languages.py).
model-e5: venv
	@ENGRAM_MODEL_DIR="$(dir $(MODEL_DIR))multilingual-e5-small" bash scripts/export-model.sh multilingual-e5-small
	@$(BIN)/python scripts/embed_vocabulary.py "$(dir $(MODEL_DIR))multilingual-e5-small" multilingual-e5-small

# Debian's Chromium, which the end-to-end tests (tests/e2e/) drive through Playwright.
browser:
	@bash scripts/install-browser.sh

# Node.js and the official JavaScript client (mem0ai, pinned by tests/clients/js/package-lock.json),
# which tests/memory/test_mem0_js_client.py drives against a live server.
node-client:
	@bash scripts/install-node-client.sh

# promtool (Debian's prometheus package): the suite checks docs/monitoring/'s alert rules and
# dashboard queries with it (tests/config/test_monitoring.py). No Prometheus server runs.
promtool:
	@bash scripts/install-promtool.sh

db: postgres
	@bash scripts/pg.sh start

migrate: venv db
	@$(WITH_ENV) DATABASE_URL="$$DATABASE_OWNER_URL" $(BIN)/python manage.py migrate --no-input -v 0

run: migrate model
	@bash scripts/run.sh

stop:
	@bash scripts/run.sh stop

test: venv db pgbouncer model model-mpnet model-e5 browser node-client promtool
	@mkdir -p .local/static
	@$(WITH_ENV) $(BIN)/pytest

# The agent frameworks' own Mem0 integrations (tests/compat/<name>/, each pinned, each in a
# throw-away environment of its own under ~/.cache/engram/compat/) against a live server and worker.
compat: venv db model
	@bash scripts/install-compat.sh
	@mkdir -p .local/static
	@$(WITH_ENV) ENGRAM_COMPAT=1 $(BIN)/pytest tests/compat

lint: venv db
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	@$(WITH_ENV) $(BIN)/mypy .
	@$(WITH_ENV) $(BIN)/python manage.py makemigrations --check --dry-run

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The documentation site (mkdocs.yml, docs/): a broken link or anchor fails the build.
docs: venv
	$(BIN)/mkdocs build --strict

# `make run`: a fresh clone to a serving gateway on SQLite with the offline demo provider.
# `make test`: lint, then the whole suite (SQLite by default; DATABASE_URL/REDIS_URL point it elsewhere).
# `make test-sqlite`: the whole suite on SQLite without Redis, as `make run` serves, whatever is set.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-sqlite lint format migrate clean bench

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

# A development .env (DEBUG=1, generated secrets) so that manage.py works in a fresh checkout.
.env:
	$(PYTHON) scripts/dev_env.py

run: $(BIN)/.installed | .env
	DEBUG=$${DEBUG:-1} $(BIN)/python scripts/run_demo.py

# Style (ruff), the apps' import direction (import-linter contracts) and types (mypy), each configured
# in pyproject.toml.
lint: $(BIN)/.installed | .env
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

format: $(BIN)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The agent CLIs the client tests run (tests/clients/node, pinned there); without npm those tests skip.
NODE_CLIENTS := tests/clients/node/node_modules/.package-lock.json
$(NODE_CLIENTS): tests/clients/node/package-lock.json
	if command -v npm >/dev/null; then npm ci --prefix tests/clients/node --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the agent CLI tests (tests/clients) will skip"; fi

test: lint $(NODE_CLIENTS)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# An empty DATABASE_URL is the development SQLite file (gateway_project/env.py; the tests make their
# own database); an empty REDIS_URL is the per-process cache.
test-sqlite: $(BIN)/.installed $(NODE_CLIENTS)
	DATABASE_URL= REDIS_URL= $(BIN)/python -m pytest $(PYTEST_ARGS)

# `make bench`: the benchmark suite (bench/run.py, ~20 minutes on 2 cores; BENCH_ARGS=--quick for a short run).
bench: $(BIN)/.installed
	BENCH_VIA_MAKE=1 $(BIN)/python bench/run.py $(BENCH_ARGS)

migrate: $(BIN)/.installed
	$(BIN)/python manage.py migrate

clean:
	rm -rf $(VENV) db.sqlite3 .demo-keys artifacts .pytest_cache .ruff_cache .mypy_cache

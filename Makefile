# The two set-up commands are `make serve` and `make test`; everything they need is installed here.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 9092
DATA_DIR ?= ./kgroups-data
PYTEST_ARGS ?=

.PHONY: install system-deps serve test test-fast lint bench clean

install: $(STAMP) system-deps

# Re-install only when the pinned dependencies change.
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "kgroups needs $(PYTHON)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

# kcat (an interop peer) and a Java runtime (for Spark) come from Debian's packages when missing.
system-deps:
	@missing=""; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	command -v java >/dev/null 2>&1 || missing="$$missing openjdk-17-jre-headless"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

serve: install
	$(BIN)/kgroups serve --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR)

lint: install
	$(BIN)/ruff check src tests bench

# Every test, slow interop and Spark ones included; coverage of the coordinator core must stay >= 95%.
test: install lint
	$(BIN)/python -m pytest --cov=kgroups --cov-report= $(PYTEST_ARGS)
	$(BIN)/python -m coverage report --include='src/kgroups/coordinator/*' --fail-under=95

# The quick loop: everything but the interop and Spark tests.
test-fast: install
	$(BIN)/python -m pytest -m "not interop and not spark" $(PYTEST_ARGS)

bench: install
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .coverage .hypothesis build src/*.egg-info

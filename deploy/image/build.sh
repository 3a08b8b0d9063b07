#!/bin/sh
# Builds Clockwork's two images with podman: the service (clockwork) and the compaction
# job (clockwork-compaction), each tagged :latest and :<content hash>.
#
#   deploy/image/build.sh            # what `make image` runs
#   PYTHON_IMAGE=... build.sh        # build on that base (e.g. the official python image)
#   deploy/image/build.sh service    # only the service image (what make compose-test needs)
#
# The base: $PYTHON_IMAGE when set; otherwise the official python:3.11 slim image when a
# registry serves it, else a Debian bookworm made here with mmdebstrap from Debian's
# packages (python 3.11 like the official image; see base_from_debian). Nothing but
# podman's own storage is written outside the work tree; podman runs with
# deploy/image/containers.conf (runc, open-files limit).
#
# The content hash covers everything that goes into the images (the Dockerfile, the
# package's files, this folder, the base), so a second run with nothing changed builds
# nothing: it finds both tags and prints them. Runs are serialised by a lock, so two
# work trees building the same thing at once build it once.
#
# Prints one line per image, "service <ref>" and "compaction <ref>", last on stdout.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/deploy/image"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$HERE/containers.conf}"
OFFICIAL=docker.io/library/python:3.11.10-slim-bookworm
LOCK=${CLOCKWORK_IMAGE_LOCK:-/var/tmp/clockwork-image.lock}

log() { echo "build.sh: $*" >&2; }

# The hash of files, by name and content, in a stable order.
hash_files() {
    (cd "$ROOT" && find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 \
        | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16
}

# The base to build on: $PYTHON_IMAGE, else the official image if it can be had (a
# refusal or no network answers within the timeout), else the Debian one made here.
choose_base() {
    if [ -n "${PYTHON_IMAGE:-}" ]; then
        echo "$PYTHON_IMAGE"
    elif podman image exists "$OFFICIAL" \
        || timeout 30 podman pull --quiet "$OFFICIAL" >/dev/null 2>&1; then
        echo "$OFFICIAL"
    else
        log "no registry serves $OFFICIAL: building on Debian's packages instead"
        "$HERE/base.sh"
    fi
}

build() {
    base=$(choose_base)
    base_id=$(podman image inspect --format '{{.Id}}' "$base")
    hash=$( (echo "$base_id"; hash_files Dockerfile .dockerignore pyproject.toml README.md \
        service deploy/image) | sha256sum | cut -c1-16)
    for target in ${TARGETS}; do
        name=clockwork
        [ "$target" = service ] || name=clockwork-$target
        ref=localhost/$name:$hash
        if podman image exists "$ref"; then
            log "$ref is built already"
        else
            log "building $ref on $base"
            start=$(date +%s)
            podman build --quiet --format docker --network host --layers \
                --build-arg "PYTHON_IMAGE=$base" --target "$target" \
                --tag "$ref" "$ROOT" >/dev/null
            log "built $ref in $(($(date +%s) - start)) s"
        fi
        podman tag "$ref" "localhost/$name:latest"
        echo "$target $ref"
    done
}

TARGETS=${*:-service compaction}
mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
flock 9
build

#!/bin/sh
# Builds the images docker-compose.yml takes from Docker Hub, for machines where no
# registry serves them (deploy/compose/podman.yml runs the compose file on them):
#
#   localhost/clockwork-kafka       Apache Kafka's jars from Maven Central (the version
#                                   of tests/kafka/pom.xml, resolved by mvn into ~/.m2)
#                                   with Debian's Java 17
#   localhost/clockwork-prometheus  Debian's prometheus package
#
# both on the Debian base of deploy/image/base.sh, each tagged :latest and :<content
# hash> (its files, the pom, the base), so a second run with nothing changed builds
# nothing. Grafana has no Debian package: it is not built (docs/operations.md).
# Serialised with deploy/image/build.sh by the same lock.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/deploy/compose"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/deploy/image/containers.conf}"
LOCK=${CLOCKWORK_IMAGE_LOCK:-/var/tmp/clockwork-image.lock}
KAFKA_POM="$ROOT/tests/kafka/pom.xml"

log() { echo "compose/build.sh: $*" >&2; }

hash_of() {
    (cd "$ROOT" && find "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) \
        | sha256sum | cut -c1-16
}

# build NAME CONTEXT HASH: builds localhost/NAME:HASH from CONTEXT/Containerfile unless
# it exists, and tags it :latest.
build() {
    ref=localhost/$1:$3
    if podman image exists "$ref"; then
        log "$ref is built already"
    else
        log "building $ref on $base"
        start=$(date +%s)
        podman build --quiet --format docker --network host --layers \
            --build-arg "BASE_IMAGE=$base" --file "$2/Containerfile" --tag "$ref" "$2" >/dev/null
        log "built $ref in $(($(date +%s) - start)) s"
    fi
    podman tag "$ref" "localhost/$1:latest"
    echo "$1 $ref"
}

main() {
    base=$("$ROOT/deploy/image/base.sh")
    base_id=$(podman image inspect --format '{{.Id}}' "$base")

    hash=$( (echo "$base_id"; hash_of deploy/compose/kafka tests/kafka/pom.xml) \
        | sha256sum | cut -c1-16)
    if podman image exists "localhost/clockwork-kafka:$hash"; then
        build clockwork-kafka "$HERE/kafka" "$hash"
    else
        # The build context: this folder's files and the broker's jars, copied from the
        # local Maven repository (mvn fetches what is missing from Maven Central).
        context=$(mktemp -d /var/tmp/clockwork-kafka.XXXXXX)
        trap 'rm -rf "$context"' EXIT
        cp -R "$HERE/kafka/." "$context/"
        mvn -q -B --no-transfer-progress -f "$KAFKA_POM" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$context/libs" >"$context/mvn.log" 2>&1 \
            || { cat "$context/mvn.log" >&2; exit 1; }
        rm "$context/mvn.log"
        build clockwork-kafka "$context" "$hash"
        rm -rf "$context"
        trap - EXIT
    fi

    hash=$( (echo "$base_id"; hash_of deploy/compose/prometheus) | sha256sum | cut -c1-16)
    build clockwork-prometheus "$HERE/prometheus" "$hash"
}

mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
flock 9
main

#!/bin/sh
# Makes a Debian base image for Clockwork's images from Debian's packages alone, for
# machines where no container registry is reachable, and prints its tag
# (localhost/clockwork-base:bookworm-<hash of this script and the CA certificates>);
# when that tag exists already, it only prints it. Called by build.sh (under its lock).
#
# mmdebstrap --variant=minbase with python3 (3.11, as the official python:3.11 image),
# venv, pip and the CA certificates; `python` and `pip` in /usr/local/bin as in the
# official image; Debian's EXTERNALLY-MANAGED marker removed, so pip installs into the
# system's python as it does there; and the machine's extra CA certificates, so that
# pip inside the build trusts the same TLS chain as on the machine. `podman import`s it.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="${CONTAINERS_CONF:-$HERE/containers.conf}"
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

log() { echo "base.sh: $*" >&2; }

# The machine's extra CA certificates (a TLS-inspecting proxy's): copied into the base so
# that pip inside the build trusts what pip on the machine trusts.
extra_cas() {
    find /usr/local/share/ca-certificates -name '*.crt' -type f 2>/dev/null | LC_ALL=C sort
}

base_from_debian() {
    cas=$(extra_cas)
    # shellcheck disable=SC2086  # cas is a list of paths without spaces
    tag=localhost/clockwork-base:$SUITE-$( (cat "$HERE/base.sh"; [ -z "$cas" ] || cat $cas) \
        | sha256sum | cut -c1-16)
    if podman image exists "$tag"; then
        echo "$tag"
        return
    fi
    log "making the Debian $SUITE base with mmdebstrap ($tag)"
    work=$(mktemp -d /var/tmp/clockwork-base.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    mkdir "$work/cas"
    [ -z "$cas" ] || cp $cas "$work/cas/"
    mmdebstrap --variant=minbase --quiet \
        --include=python3,python3-venv,python3-pip,ca-certificates \
        --customize-hook="cp -R '$work'/cas/. \"\$1/usr/local/share/ca-certificates/\"" \
        --customize-hook='chroot "$1" update-ca-certificates' \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python"' \
        --customize-hook='ln -sf /usr/bin/pip3 "$1/usr/local/bin/pip"' \
        --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
        "$SUITE" "$work/base.tar" \
        "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
        "deb $SECURITY $SUITE-security main" >&2
    podman import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        "$work/base.tar" "$tag" >/dev/null
    rm -rf "$work"
    trap - EXIT
    echo "$tag"
}

base_from_debian

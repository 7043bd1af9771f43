#!/usr/bin/env bash
# Build the base image cqlstream-base:local without any container registry: debootstrap a minimal
# Debian (the host's release) with Python 3, venv and a Java 17 runtime into a folder, then
# `docker import` it. Build the app on it with `--build-arg BASE_IMAGE=cqlstream-base:local`.
#
# Needs root, debootstrap and a running Docker daemon. Environment:
#   BASE_TAG       image tag to create (default cqlstream-base:local)
#   SUITE          Debian release (default: VERSION_CODENAME of /etc/os-release)
#   DEBIAN_MIRROR  mirror for debootstrap (default: debootstrap's own default)
#   ROOTFS         folder to debootstrap into (default build/docker-base-rootfs; removed afterwards)
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_TAG=${BASE_TAG:-cqlstream-base:local}
# shellcheck disable=SC1091
SUITE=${SUITE:-$(. /etc/os-release && echo "$VERSION_CODENAME")}
ROOTFS=${ROOTFS:-build/docker-base-rootfs}
PACKAGES=python3,python3-venv,openjdk-17-jre-headless,ca-certificates

die() { echo "docker_base: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "debootstrap needs root"
command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
docker info >/dev/null 2>&1 || die "no Docker daemon answers (docker info failed)"

cleanup() { rm -rf "$ROOTFS"; }
trap cleanup EXIT
rm -rf "$ROOTFS"
mkdir -p "$ROOTFS"

echo "docker_base: debootstrap $SUITE ($PACKAGES) into $ROOTFS"
# shellcheck disable=SC2086
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" ${DEBIAN_MIRROR:-}

# what an image needs no copy of: downloaded .debs, package lists, docs
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
    "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/*
# the DNS set-up of the host machine is not part of the image
: >"$ROOTFS/etc/resolv.conf"

echo "docker_base: importing as $BASE_TAG"
tar -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$BASE_TAG"
# checked in a container (a plain chroot has no /proc, which the JVM's loader needs)
docker run --rm --network none "$BASE_TAG" sh -c \
    'java -version 2>&1 | head -1 && python3 -c "import ensurepip, venv, sys; print(\"python\", sys.version.split()[0])"'
docker image inspect --format '{{.Id}} {{.Size}}' "$BASE_TAG"

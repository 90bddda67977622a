#!/bin/sh
# A local Debian bookworm base image with python3, made from Debian packages alone, for
# machines that reach a Debian mirror but no container image registry (where
# `FROM python:3.11-slim` cannot be pulled):
#
#   sudo deploy/base-image.sh [NAME]          # default NAME: marekvs-base:bookworm
#   docker build --network host --build-arg BASE_IMAGE=marekvs-base:bookworm \
#     -f deploy/Dockerfile -t marekvs:local .
#
# debootstrap (minbase: essential packages and apt) with python3, python3-venv and
# ca-certificates, trimmed of apt lists, caches, documentation and translations, then
# `docker import`ed. Needs root, debootstrap and a running Docker engine; the mirror is
# $DEBIAN_MIRROR (default http://deb.debian.org/debian). Debian's python3 is 3.11 in bookworm.
#
# The certificates the host added to its own trust store ($LOCAL_CA_DIR, default
# /usr/local/share/ca-certificates, e.g. a TLS-inspecting egress proxy's CA) are added to the
# image's, so that pip inside a build trusts what the host trusts (Debian's pip uses the system
# bundle). An image made this way is for this machine; do not publish it.
set -eu

NAME=${1:-marekvs-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
LOCAL_CA_DIR=${LOCAL_CA_DIR:-/usr/local/share/ca-certificates}

dir=$(mktemp -d /tmp/marekvs-base.XXXXXX)
cleanup() {
    # debootstrap mounts proc/sys inside the target; never delete through a mount
    for m in $(awk -v d="$dir" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r); do
        umount -l "$m" 2>/dev/null || true
    done
    rm -rf --one-file-system "$dir"
}
trap cleanup EXIT INT TERM

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$dir" "$MIRROR"
if [ -d "$LOCAL_CA_DIR" ] && [ -n "$(ls -A "$LOCAL_CA_DIR")" ]; then
    cp -R "$LOCAL_CA_DIR"/. "$dir"/usr/local/share/ca-certificates/
    chroot "$dir" update-ca-certificates >/dev/null
fi
chroot "$dir" apt-get clean
rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/* "$dir"/var/cache/debconf/*-old \
    "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
    "$dir"/var/log/* "$dir"/tmp/* "$dir"/root/.cache

chmod 755 "$dir"  # mktemp made it 0700: the image's / must be searchable by every user
tar -C "$dir" --numeric-owner -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    - "$NAME" >/dev/null
echo "$NAME: $(docker image inspect --format '{{.Size}}' "$NAME") bytes"

#!/bin/sh
# Builds localhost/xwire-busybox:latest, the image of examples/containers.yaml, offline:
# FROM scratch with the host's static busybox (apt-get install busybox-static podman).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
busybox=$(command -v busybox) || { echo "no busybox: apt-get install busybox-static" >&2; exit 1; }
if ldd "$busybox" >/dev/null 2>&1; then
    echo "$busybox is linked dynamically: apt-get install busybox-static" >&2
    exit 1
fi
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$busybox" "$context/busybox"
cp "$here/Containerfile" "$context/Containerfile"
runtime=""
if command -v runc >/dev/null; then runtime="--runtime runc"; fi
# shellcheck disable=SC2086 # $runtime is empty or two words
# --network none: the RUN step needs no network, and podman's default one would make
# the host bridge cni-podman0 (10.88.0.1/16), turn on ip_forward and add iptables chains.
podman build $runtime --pull=never --network none --tag localhost/xwire-busybox:latest "$context"

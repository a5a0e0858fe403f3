#!/usr/bin/env bash
# Build the local systemd test images from scratch (no registry is reachable here):
# debootstrap minbase + `docker import`. Cached: an image is rebuilt only when
# this recipe changes (its hash is stored as a label on the image).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mirror=${GPUOPS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=python3,systemd,systemd-sysv,dbus,sudo,ca-certificates,gnupg,procps,iproute2
recipe_hash=$( { cat "$0"; echo "$packages"; } | sha256sum | cut -c1-16)

build() {
  local suite=$1 tag=$2 have root
  have=$(docker image inspect -f '{{ index .Config.Labels "gpuops.recipe" }}' "$tag" 2>/dev/null || true)
  if [ "$have" = "$recipe_hash" ]; then
    echo "image $tag: up to date (recipe $recipe_hash)"
    return 0
  fi
  echo "image $tag: building from debootstrap $suite (recipe $recipe_hash)"
  root=$(mktemp -d /tmp/gpuops-rootfs.XXXXXX)
  trap 'rm -rf "$root"' RETURN
  debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$root.log" 2>&1 || {
    echo "ERROR: debootstrap $suite failed; last lines of $root.log:" >&2; tail -20 "$root.log" >&2; return 1; }
  # A container boots systemd as PID 1: mask units that make no sense there.
  for unit in getty.target systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
              systemd-remount-fs.service sys-kernel-config.mount sys-kernel-debug.mount dev-hugepages.mount \
              systemd-modules-load.service systemd-timesyncd.service; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
  done
  echo "deb $mirror $suite main" >"$root/etc/apt/sources.list"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import \
    -c 'CMD ["/lib/systemd/systemd"]' -c 'ENV container=docker' \
    -c "LABEL gpuops.recipe=$recipe_hash" -c "LABEL gpuops.suite=$suite" - "$tag" >/dev/null
  rm -f "$root.log"
  echo "image $tag: built"
}

want=${1:-all}
case "$want" in
  debian12) build bookworm gpuops/debian12-systemd ;;
  debian13) build trixie gpuops/debian13-systemd ;;
  all) build bookworm gpuops/debian12-systemd; build trixie gpuops/debian13-systemd ;;
  *) echo "usage: $0 [debian12|debian13|all]" >&2; exit 2 ;;
esac

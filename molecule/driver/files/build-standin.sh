#!/usr/bin/env bash
# Build a TEST STAND-IN .deb named nvidia-container-toolkit (NVIDIA's package cannot be fetched here).
# Its executables are the LABELLED stand-ins in standin/ next to this script (see each file's header); the
# runtime configuration they lead to is proven against the real dockerd and containerd.
# Usage: build-standin.sh VERSION OUTDIR
set -euo pipefail
version=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(mktemp -d)
chmod 0755 "$root"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/etc/nvidia-container-runtime"
cat >"$root/DEBIAN/control" <<CONTROL
Package: nvidia-container-toolkit
Version: ${version}-1
Architecture: all
Maintainer: gpuops.cluster test suite <tests@gpuops.invalid>
Depends: runc, python3
Section: utils
Priority: optional
Description: TEST STAND-IN for nvidia-container-toolkit, NOT NVIDIA's package
 Built by the gpuops.cluster Molecule scenario "driver" with dpkg-deb from the
 payloads in molecule/driver/files/standin/: /usr/bin/nvidia-container-runtime
 (records what each container asked for under the real runtime's rules, then
 execs runc), /usr/bin/nvidia-ctk (--version, and cdi generate from a labelled
 GPU fixture) and /etc/nvidia-container-runtime/config.toml. It proves
 repository, pin and hold handling and the docker/containerd/CDI wiring; it
 gives no GPU access.
CONTROL
echo /etc/nvidia-container-runtime/config.toml >"$root/DEBIAN/conffiles"
install -m 0755 "$here/standin/nvidia-container-runtime" "$root/usr/bin/nvidia-container-runtime"
sed "s/@VERSION@/${version}/" "$here/standin/nvidia-ctk" >"$root/usr/bin/nvidia-ctk"
chmod 0755 "$root/usr/bin/nvidia-ctk"
install -m 0644 "$here/standin/config.toml" "$root/etc/nvidia-container-runtime/config.toml"
mkdir -p "$out"
dpkg-deb --root-owner-group --build "$root" "$out/nvidia-container-toolkit_${version}-1_all.deb" >/dev/null

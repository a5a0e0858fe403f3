#!/usr/bin/env bash
# Build a TEST STAND-IN .deb named nvidia-container-toolkit (NVIDIA's package cannot be fetched here).
# It exists only to exercise repository, pin and hold; the runtime configuration it leads to is proven
# against the real dockerd and containerd. Usage: build-standin.sh VERSION OUTDIR
set -euo pipefail
version=$1 out=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/DEBIAN" "$root/usr/bin"
cat >"$root/DEBIAN/control" <<CONTROL
Package: nvidia-container-toolkit
Version: ${version}-1
Architecture: all
Maintainer: gpuops.cluster test suite <tests@gpuops.invalid>
Depends: runc
Section: utils
Priority: optional
Description: TEST STAND-IN for nvidia-container-toolkit, NOT NVIDIA's package
 Built by the gpuops.cluster Molecule scenario "driver" with dpkg-deb. It ships
 /usr/bin/nvidia-container-runtime (a script that logs its call and execs runc)
 and a /usr/bin/nvidia-ctk that only reports its version. It proves repository,
 pin and hold handling and the docker/containerd runtime wiring; it gives no GPU
 access.
CONTROL
cat >"$root/usr/bin/nvidia-container-runtime" <<'RUNTIME'
#!/bin/sh
# TEST STAND-IN for NVIDIA's nvidia-container-runtime: record the call, then hand over to runc.
echo "$(date +%s) $*" >>/var/log/gpuops-nvidia-runtime-standin.log 2>/dev/null || true
for r in /usr/sbin/runc /usr/bin/runc; do
  [ -x "$r" ] && exec "$r" "$@"
done
echo "nvidia-container-runtime (TEST STAND-IN): runc not found" >&2
exit 1
RUNTIME
cat >"$root/usr/bin/nvidia-ctk" <<CTK
#!/bin/sh
# TEST STAND-IN for NVIDIA's nvidia-ctk.
case "\${1:-}" in
  --version|-v) echo "NVIDIA Container Toolkit CLI version ${version} (TEST STAND-IN, not NVIDIA's binary)" ;;
  *) echo "nvidia-ctk (TEST STAND-IN): '\$*' is not implemented; this test package cannot generate CDI specs" >&2; exit 1 ;;
esac
CTK
chmod 0755 "$root/usr/bin/nvidia-container-runtime" "$root/usr/bin/nvidia-ctk"
mkdir -p "$out"
dpkg-deb --root-owner-group --build "$root" "$out/nvidia-container-toolkit_${version}-1_all.deb" >/dev/null

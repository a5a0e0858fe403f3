#!/usr/bin/env bash
# Build TEST STAND-IN .debs named kubelet, kubeadm and cri-tools (pkgs.k8s.io cannot be reached here), with the
# package names, versions and dependency structure of pkgs.k8s.io's (kubeadm depends on cri-tools; kubelet ships
# kubelet.service and kubeadm the 10-kubeadm.conf drop-in). Their executables are the LABELLED stand-ins in
# standin/ next to this script (see each file's header).
# Usage: build-standin-kube.sh KUBE_VERSION CRI_TOOLS_VERSION REVISION OUTDIR   (e.g. 1.34.2 1.34.0 1.1 /tmp/kube)
set -euo pipefail
kube=$1 cri=$2 rev=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
build() { # build NAME VERSION DEPENDS DESCRIPTION-LINE; the payload is already in $root
  cat >"$root/DEBIAN/control" <<CONTROL
Package: $1
Version: $2
Architecture: all
Maintainer: gpuops.cluster test suite <tests@gpuops.invalid>
${3:+Depends: $3
}Section: admin
Priority: optional
Description: TEST STAND-IN for $1, NOT the Kubernetes project's package
 Built by the gpuops.cluster Molecule scenario "kubernetes" with dpkg-deb from
 molecule/kubernetes/files/standin/. $4
 It proves repository, pin and hold handling and the kubeadm orchestration;
 it runs no cluster.
CONTROL
  dpkg-deb --root-owner-group --build "$root" "$out/${1}_${2}_all.deb" >/dev/null
  rm -rf "$root"
}
payload() { # payload STANDIN VERSION -> $root/usr/bin/STANDIN
  root=$(mktemp -d); chmod 0755 "$root"; mkdir -p "$root/DEBIAN" "$root/usr/bin"
  sed "s/@VERSION@/$2/" "$here/standin/$1" >"$root/usr/bin/$1"; chmod 0755 "$root/usr/bin/$1"
}

payload kubelet "$kube"
mkdir -p "$root/usr/lib/systemd/system"
cat >"$root/usr/lib/systemd/system/kubelet.service" <<'UNIT'
[Unit]
Description=kubelet: TEST STAND-IN (gpuops.cluster molecule kubernetes scenario)
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
build kubelet "$kube-$rev" "" "The kubelet sleeps once kubeadm wrote its configuration."

payload crictl "$cri"
build cri-tools "$cri-$rev" "" "crictl answers --version; info asks containerd through ctr."

payload kubeadm "$kube"
mkdir -p "$root/usr/lib/systemd/system/kubelet.service.d"
cat >"$root/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf" <<'UNIT'
# TEST STAND-IN drop-in (the real kubeadm package ships one like it)
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS
UNIT
build kubeadm "$kube-$rev" "cri-tools (>= 1.30.0), python3, python3-yaml, openssl" \
  "Runs kubeadm's host preflight checks and writes the files kubeadm writes."
echo "build-standin-kube: kubelet/kubeadm $kube-$rev, cri-tools $cri-$rev in $out"

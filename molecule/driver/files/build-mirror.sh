#!/usr/bin/env bash
# Build the scenario's local apt mirror under /srv/gpuops-mirror, signed with a throwaway key:
#   debian/  dists/bookworm/non-free: Debian's REAL NVIDIA driver packages at every version in
#            DRIVER_VERSIONS (the headless set the role installs, and everything it pulls in from
#            contrib/non-free/non-free-firmware; main comes from deb.debian.org as usual)
#   nct/     flat repository ("deb URL /", like NVIDIA's): TEST STAND-INS of the Container Toolkit's four
#            packages at STANDIN_VERSIONS (build-standin-nvidia.py --toolkit, from nvidia-repo-structure.json
#            next to this script)
#   cuda/    flat repository like NVIDIA's CUDA repository: LABELLED STAND-INS with its package names and
#            dependency structure (build-standin-nvidia.py, from NVIDIA_STANDIN = the structure as JSON), and
#            gpuops-test-uu-control 1-1 and 2-1 (the unattended-upgrades test's control); with DCGM_STANDIN (the
#            structure as JSON) also the LABELLED STAND-INS of DCGM 4's packages (build-standin-nvidia.py --dcgm),
#            which NVIDIA's CUDA repository carries next to the driver
#   NAME/    one more flat repository per NAME=DIR in FLAT_REPOS, with the .debs found in DIR (other
#            scenarios' stand-ins, e.g. molecule/kubernetes: kube=/var/tmp/gpuops-kube-debs)
#   keys/    gpuops-test-mirror.asc (signs all) and wrong-key.asc (signs nothing; negative test), and
#            gpuops-test-mirror.fpr (the signing key's fingerprint, for pinned_packages_repo.key_fingerprint)
# Env: DRIVER_VERSIONS ("" = no driver packages), DRIVER_PACKAGES, COMPANIONS, STANDIN_VERSIONS,
#      DEB_CACHE (downloaded .debs are kept there between runs), SUITE, FLAT_REPOS,
#      NVIDIA_STANDIN, DCGM_STANDIN.
set -euo pipefail
mirror=/srv/gpuops-mirror
cache=${DEB_CACHE:-/var/cache/gpuops-debs}
suite=${SUITE:-bookworm}
here=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
mkdir -p "$mirror"/{keys,debian/pool,nct} "$cache"
rm -f "$mirror"/debian/pool/*.deb "$mirror"/nct/*.deb

# 1. Throwaway keys (ed25519, no passphrase), created once per node.
for k in signing wrong; do
  home=/root/.gpuops-mirror-gnupg-$k
  mkdir -p -m 0700 "$home"
  if ! gpg --homedir "$home" --list-secret-keys 2>/dev/null | grep -q sec; then
    gpg --homedir "$home" --batch --passphrase '' --quick-gen-key \
      "gpuops test mirror $k key (THROWAWAY, molecule driver scenario) <tests@gpuops.invalid>" ed25519 sign never 2>/dev/null
  fi
done
gpg --homedir /root/.gpuops-mirror-gnupg-signing --armor --export >"$mirror/keys/gpuops-test-mirror.asc"
gpg --homedir /root/.gpuops-mirror-gnupg-wrong --armor --export >"$mirror/keys/wrong-key.asc"
gpg --homedir /root/.gpuops-mirror-gnupg-signing --with-colons --fingerprint | awk -F: '/^fpr/{print $10; exit}' \
  >"$mirror/keys/gpuops-test-mirror.fpr"

sign() { # sign DIR: Release -> Release.gpg + InRelease
  local g=(gpg --homedir /root/.gpuops-mirror-gnupg-signing --batch --yes)
  "${g[@]}" --armor --detach-sign -o "$1/Release.gpg" "$1/Release"
  "${g[@]}" --clearsign -o "$1/InRelease" "$1/Release"
}

# 2. Debian's real driver packages, downloaded once into the cache.
if [ -n "${DRIVER_VERSIONS:-}" ]; then
  dl=/var/tmp/gpuops-mirror-apt
  mkdir -p "$dl"/{lists/partial,cache/archives/partial,parts}
  cat >"$dl/sources.list" <<SOURCES
deb http://deb.debian.org/debian $suite main contrib non-free non-free-firmware
deb http://deb.debian.org/debian-security $suite-security main contrib non-free non-free-firmware
SOURCES
  opts=(-o "Dir::Etc::SourceList=$dl/sources.list" -o "Dir::Etc::SourceParts=$dl/parts"
        -o "Dir::State::Lists=$dl/lists" -o "Dir::Cache=$dl/cache" -o "APT::Sandbox::User=root")
  apt-get -qq "${opts[@]}" update
  : >"$dl/wanted"
  for v in $DRIVER_VERSIONS; do
    first=${DRIVER_PACKAGES%% *}
    av=$(apt-cache "${opts[@]}" madison "$first" | awk -F'|' -v v="$v" '{gsub(/ /,"",$2)} $2 ~ "^"v"-" {print $2; exit}')
    [ -n "$av" ] || { echo "build-mirror: Debian offers no $first $v" >&2; exit 1; }
    spec=(); for p in $DRIVER_PACKAGES; do spec+=("$p=$av"); done
    # Everything the headless set pulls in, as apt would resolve it on this node...
    apt-get "${opts[@]}" -s install --no-install-recommends "${spec[@]}" $COMPANIONS \
      | awk '/^Inst /{v = ($3 ~ /^\[/) ? $4 : $3; gsub(/[()]/, "", v); print $2, v}' >"$dl/closure"
    # ...keeping what is not in main (main stays on deb.debian.org, as on a real host).
    while read -r p ver; do
      section=$(apt-cache "${opts[@]}" show "$p=$ver" | awk '/^Section:/{print $2; exit}')
      case "$section" in contrib/*|non-free/*|non-free-firmware/*) echo "$p $ver" >>"$dl/wanted" ;; esac
    done <"$dl/closure"
  done
  sort -u -o "$dl/wanted" "$dl/wanted"
  fetched=0
  while read -r p ver; do
    f=$(apt-cache "${opts[@]}" show "$p=$ver" | awk '/^Filename:/{print $2; exit}')
    f=${f##*/}
    if [ ! -s "$cache/$f" ]; then
      (cd "$cache" && apt-get -qq "${opts[@]}" download "$p=$ver")
      fetched=$((fetched + 1))
    fi
    cp "$cache/$f" "$mirror/debian/pool/"
  done <"$dl/wanted"
  echo "build-mirror: $(wc -l <"$dl/wanted") driver .debs for $DRIVER_VERSIONS ($fetched downloaded, the rest from the cache)"
  rm -rf "$dl"

  cd "$mirror/debian"
  rm -rf dists
  mkdir -p "dists/$suite/non-free/binary-amd64"
  apt-ftparchive packages pool >"dists/$suite/non-free/binary-amd64/Packages"
  gzip -9kf "dists/$suite/non-free/binary-amd64/Packages"
  apt-ftparchive -o APT::FTPArchive::Release::Origin=gpuops-test-mirror -o APT::FTPArchive::Release::Label=gpuops-test-mirror \
    -o APT::FTPArchive::Release::Suite="$suite" -o APT::FTPArchive::Release::Codename="$suite" \
    -o APT::FTPArchive::Release::Architectures="amd64 all" -o APT::FTPArchive::Release::Components=non-free \
    release "dists/$suite" >/tmp/Release && mv /tmp/Release "dists/$suite/Release"
  sign "dists/$suite"
fi

flat_repo() { # flat_repo DIR: index and sign the .debs in DIR ("deb URL /")
  (cd "$1"
   rm -f Packages Packages.gz Release Release.gpg InRelease
   apt-ftparchive packages . >Packages
   gzip -9kf Packages
   apt-ftparchive -o APT::FTPArchive::Release::Origin=gpuops-test-mirror release . >/tmp/Release && mv /tmp/Release Release
   sign .)
}

# 3. The toolkit stand-ins, in a flat repository.
if [ -n "${STANDIN_VERSIONS:-}" ]; then
  python3 "$here/build-standin-nvidia.py" "$here/nvidia-repo-structure.json" "$mirror/nct" --toolkit $STANDIN_VERSIONS
fi
flat_repo "$mirror/nct"

# 4. Other flat repositories (NAME=DIR: the .debs in DIR, served under NAME/).
for spec in ${FLAT_REPOS:-}; do
  name=${spec%%=*} src=${spec#*=}
  rm -rf "${mirror:?}/$name"; mkdir -p "$mirror/$name"
  cp "$src"/*.deb "$mirror/$name/"
  flat_repo "$mirror/$name"
  echo "build-mirror: $name/: $(ls "$mirror/$name"/*.deb | wc -l) .debs from $src"
done

# 5. Stand-ins of NVIDIA's CUDA repository (names and dependency structure only), flat like NVIDIA's: the
#    driver's packages (NVIDIA_STANDIN) and DCGM's (DCGM_STANDIN), either or both.
rm -rf "${mirror:?}/cuda"
if [ -n "${DCGM_STANDIN:-}" ]; then
  python3 "$here/build-standin-nvidia.py" "$DCGM_STANDIN" "$mirror/cuda" --dcgm
  [ -n "${NVIDIA_STANDIN:-}" ] || flat_repo "$mirror/cuda"
fi
if [ -n "${NVIDIA_STANDIN:-}" ]; then
  python3 "$here/build-standin-nvidia.py" "$NVIDIA_STANDIN" "$mirror/cuda"
  # The unattended-upgrades test's CONTROL: a package nothing pins or holds, at versions 1 and 2, so that the test
  # shows unattended-upgrade does take a newer version from this origin when nothing stops it.
  for v in 1 2; do
    ctl=$(mktemp -d); chmod 0755 "$ctl"; mkdir "$ctl/DEBIAN"
    printf '%s\n' "Package: gpuops-test-uu-control" "Version: $v-1" "Architecture: all" \
      "Maintainer: gpuops.cluster test suite <tests@gpuops.invalid>" "Section: misc" "Priority: optional" \
      "Description: TEST CONTROL package of the unattended-upgrades test (gpuops.cluster), not NVIDIA's" \
      >"$ctl/DEBIAN/control"
    dpkg-deb --root-owner-group -Zgzip --build "$ctl" "$mirror/cuda/gpuops-test-uu-control_$v-1_all.deb" >/dev/null
    rm -rf "$ctl"
  done
  flat_repo "$mirror/cuda"
fi
chmod -R a+rX "$mirror"
echo "build-mirror: done in $(( $(date +%s) - t0 )) s: $(du -sh "$mirror" | cut -f1) in $mirror"

#!/usr/bin/env bash
# Runs INSIDE the test container (a Debian 12 stand-in for a RHEL host's package manager: the OS is Debian, dnf,
# rpm and its database are real). Builds two versions (1.0-1, 1.1-1) of three small noarch RPMs -
# gpuops-demo-tool requires gpuops-demo-lib = its own version, gpuops-demo-lib requires gpuops-demo-data (any
# version) - signs them and the repository metadata with a throw-away key, and leaves:
#   /srv/repo/          the createrepo_c repository (repomd.xml.asc beside repomd.xml)
#   /srv/repo/key.asc   the armored public key;  /srv/repo/fingerprint  its full fingerprint
#   /srv/impostor.asc   a signature of the same repomd.xml by another key (what a tampered mirror would serve)
set -euo pipefail
export GNUPGHOME=/root/.gnupg-repo LC_ALL=C
mkdir -p -m 0700 "$GNUPGHOME"
gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
  --quick-gen-key 'gpuops test repository <test@gpuops.invalid>' rsa2048 sign never 2>/dev/null
fpr=$(gpg --batch --with-colons --list-keys | awk -F: '$1 == "fpr" {print $10; exit}')
mkdir -p /srv/repo /root/rpmbuild/SPECS
for version in 1.0 1.1; do
  for pkg in data lib tool; do
    case $pkg in
      tool) requires="Requires: gpuops-demo-lib = %{version}-%{release}" ;;
      lib) requires="Requires: gpuops-demo-data" ;;
      data) requires="" ;;
    esac
    cat >/root/rpmbuild/SPECS/gpuops-demo-$pkg.spec <<SPEC
Name: gpuops-demo-$pkg
Version: $version
Release: 1
Summary: gpuops.cluster dnf test package ($pkg)
License: Apache-2.0
BuildArch: noarch
AutoReqProv: no
$requires
%description
A test package for the _pinned_packages dnf path.
%install
mkdir -p %{buildroot}/usr/share/gpuops-demo
echo "$pkg $version" > %{buildroot}/usr/share/gpuops-demo/$pkg
%files
/usr/share/gpuops-demo/$pkg
SPEC
    rpmbuild -bb --quiet /root/rpmbuild/SPECS/gpuops-demo-$pkg.spec >/dev/null
  done
done
cp /root/rpmbuild/RPMS/noarch/*.rpm /srv/repo/
rpmsign --addsign --define "_gpg_name $fpr" --define "_gpg_path $GNUPGHOME" --define "__gpg /usr/bin/gpg" /srv/repo/*.rpm >/dev/null 2>&1
createrepo_c --quiet /srv/repo
gpg --batch --yes --detach-sign --armor --local-user "$fpr" /srv/repo/repodata/repomd.xml
gpg --batch --armor --export "$fpr" >/srv/repo/key.asc
echo "$fpr" >/srv/repo/fingerprint
# Another key's signature of the same metadata, for the case that swaps it in.
export GNUPGHOME=/root/.gnupg-impostor
mkdir -p -m 0700 "$GNUPGHOME"
gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
  --quick-gen-key 'impostor <impostor@gpuops.invalid>' rsa2048 sign never 2>/dev/null
gpg --batch --yes --detach-sign --armor -o /srv/impostor.asc /srv/repo/repodata/repomd.xml 2>/dev/null

#!/usr/bin/env bash
# Host set-up shared by `make test` and `make demo`, idempotent:
#   - refuses early, in one line with the fix, when it cannot work (not root, no apt);
#   - installs docker.io and debootstrap with apt when missing;
#   - starts dockerd in the background when no daemon answers.
# The Python virtualenv and the test images are built by the Makefile targets.
set -euo pipefail

die() { echo "setup: ERROR: $*" >&2; exit 1; }
say() { echo "setup: $*"; }

[ "$(id -u)" -eq 0 ] || die "running as uid $(id -u); the test harness installs packages and runs dockerd, so it needs root. Fix: run as root (sudo make test)."
command -v apt-get >/dev/null 2>&1 || die "apt-get not found; set-up supports Debian/Ubuntu controllers. Fix: run on Debian 12 or 13, or install docker.io and debootstrap yourself and rerun."
command -v python3 >/dev/null 2>&1 || die "python3 not found. Fix: apt-get install python3 python3-venv."
python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || die "python3 is $(python3 -V 2>&1); ansible-core 2.19 needs Python >= 3.11 on the controller. Fix: install python3.11 or newer."

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
# promtool (from Debian's prometheus package) runs the alert-rule unit tests.
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
# Debian's headless-capable Chromium renders the fleet report in tests/report (screenshot + DOM).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} with apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || die "apt-get update failed. Fix: check /etc/apt/sources.list and network access to the Debian mirror."
  # Install only: no package may start a daemon on this machine (prometheus would bind :9090).
  policy=/usr/sbin/policy-rc.d
  [ -e "$policy" ] || { printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; trap 'rm -f /usr/sbin/policy-rc.d' EXIT; }
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/var/log/gpuops-apt.log 2>&1 \
    || die "apt-get install ${missing[*]} failed (log: /var/log/gpuops-apt.log). Fix: run 'apt-get install ${missing[*]}' by hand to see why."
fi

if ! docker info >/dev/null 2>&1; then
  # This PID namespace's dockerd only: the molecule nodes' own dockerds show in the host's process list too.
  if pgrep -x dockerd --ns $$ --nslist pid >/dev/null 2>&1; then
    say "dockerd is starting; waiting for it"
  else
    say "no Docker daemon answers; starting dockerd in the background (log: /var/log/gpuops-dockerd.log)"
    # Without the caller's descriptors above 2: a `flock <lock> make ...` caller's lock would otherwise live on in
    # dockerd (and its containerd) and hold that lock for as long as the daemon runs. In a session of its own
    # (setsid): a caller's `timeout` or job control that ends its process group would otherwise stop the daemon too.
    (
      for fd in /proc/self/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
      done
      exec setsid nohup dockerd >/var/log/gpuops-dockerd.log 2>&1
    ) &
  fi
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || die "dockerd did not answer within 60 s; see /var/log/gpuops-dockerd.log. Fix: start a Docker daemon (dockerd &) and rerun."
fi
say "host ready: $(docker version -f 'docker {{.Server.Version}}' 2>/dev/null), $(debootstrap --version 2>/dev/null | head -1 || echo debootstrap)"

#!/usr/bin/env bash
# ansible-doc must render every module, filter and role entry point of the collection in place.
# One ansible-doc run per plugin type renders all its plugins (each run costs about half a second of CPU to start,
# and there are some 90 plugins); when that run fails or warns, each plugin of the type is rendered alone, so that
# the failure names the plugin.
set -euo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_COLLECTIONS_PATH=$PWD/collections
rc=0
err=build/logs/doc-err.txt

# check_type TYPE NAME...: every NAME (gpuops.cluster.<name>) renders as TYPE without error or warning.
check_type() {
  local type=$1 name; shift
  [ $# -gt 0 ] || return 0
  if ansible-doc -t "$type" "${@/#/gpuops.cluster.}" >/dev/null 2>"$err" && ! grep -q WARNING "$err"; then
    for name in "$@"; do echo "ok $type gpuops.cluster.$name"; done
    return 0
  fi
  for name in "$@"; do
    if ansible-doc -t "$type" "gpuops.cluster.$name" >/dev/null 2>"$err" && ! grep -q WARNING "$err"; then
      echo "ok $type gpuops.cluster.$name"
    else echo "FAIL $type gpuops.cluster.$name: $(cat "$err")"; rc=1; fi
  done
}

modules=()
for f in plugins/modules/*.py; do
  name=$(basename "$f" .py); [ "$name" = "__init__" ] || modules+=("$name")
done
filters=()
for f in plugins/filter/*.yml; do if [ -e "$f" ]; then filters+=("$(basename "$f" .yml)"); fi; done
roles=()
for d in roles/*/; do roles+=("$(basename "$d")"); done

check_type module "${modules[@]}"
check_type filter "${filters[@]}"
check_type role "${roles[@]}"
exit $rc

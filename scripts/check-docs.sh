#!/usr/bin/env bash
# ansible-doc must render every module, filter and role entry point of the collection in place.
set -euo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_COLLECTIONS_PATH=$PWD/collections
rc=0
for f in plugins/modules/*.py; do
  name=$(basename "$f" .py); [ "$name" = "__init__" ] && continue
  if ansible-doc -t module "gpuops.cluster.$name" >/dev/null 2>build/logs/doc-err.txt && ! grep -q WARNING build/logs/doc-err.txt; then
    echo "ok module gpuops.cluster.$name"
  else echo "FAIL module gpuops.cluster.$name: $(cat build/logs/doc-err.txt)"; rc=1; fi
done
for f in plugins/filter/*.yml; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .yml)
  if ansible-doc -t filter "gpuops.cluster.$name" >/dev/null 2>build/logs/doc-err.txt && ! grep -q WARNING build/logs/doc-err.txt; then
    echo "ok filter gpuops.cluster.$name"
  else echo "FAIL filter gpuops.cluster.$name: $(cat build/logs/doc-err.txt)"; rc=1; fi
done
for d in roles/*/; do
  name=$(basename "$d")
  if ansible-doc -t role "gpuops.cluster.$name" >/dev/null 2>build/logs/doc-err.txt && ! grep -q WARNING build/logs/doc-err.txt; then
    echo "ok role gpuops.cluster.$name"
  else echo "FAIL role gpuops.cluster.$name: $(cat build/logs/doc-err.txt)"; rc=1; fi
done
exit $rc

#!/usr/bin/env bash
# `make demo`: provision a disposable local "GPU node" (a systemd container on this
# machine) with site.yml and the demo inventory, then print what was done.
# `make demo-clean` (scripts/demo.sh --destroy) removes the node.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--destroy" ]; then
  ansible-playbook playbooks/demo_node.yml -e demo_state=absent
  exit 0
fi
mkdir -p build/logs
echo "demo: starting the local node container gpuops-demo-node"
ansible-playbook playbooks/demo_node.yml >build/logs/demo-node.log 2>&1 \
  || { tail -30 build/logs/demo-node.log; echo "demo: ERROR: could not start the demo node (log: build/logs/demo-node.log)" >&2; exit 1; }
echo "demo: running site.yml against inventories/demo (log: build/logs/demo-site.log)"
set +e
ANSIBLE_CALLBACKS_ENABLED=ansible.builtin.timer ansible-playbook -i inventories/demo/hosts.yml site.yml 2>&1 | tee build/logs/demo-site.log \
  | grep -E '^(PLAY|TASK) \[|^(changed|ok|fatal|failed|skipping):|PLAY RECAP|gpuops-demo-node +:|Playbook run took'
rc=${PIPESTATUS[0]}
set -e
echo
if [ -f build/demo-summary.txt ]; then cat build/demo-summary.txt; fi
latest=$(ls -td reports/*/ 2>/dev/null | head -1 || true)
if [ -n "$latest" ]; then
  echo "demo: preflight report: ${latest}"
  for f in "$latest"*.md; do [ -e "$f" ] && cat "$f"; done
fi
if [ "$rc" -ne 0 ]; then
  echo "demo: FAILED (ansible-playbook exit $rc); see build/logs/demo-site.log" >&2
  exit "$rc"
fi
echo "demo: done. The node stays up for inspection: docker exec -it gpuops-demo-node bash; remove it with make demo-clean"

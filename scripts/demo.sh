#!/usr/bin/env bash
# `make demo`: provision a disposable local "GPU node" (a systemd container on this machine) with
# site.yml and the demo inventory, then print what was done: the play recaps, the stack's endpoints
# with a command that proves each answers, `docker compose ps`, and the preflight report.
#   1. node     playbooks/demo_node.yml            start gpuops-demo-node (Debian 13, systemd)
#   2. images   molecule/resources/local_images.yml Docker, a registry on the node's 127.0.0.1:5001 and
#                                                   the stack's images (built once, cached on the host,
#                                                   shared with the Molecule compose scenario)
#   3. site     site.yml -i inventories/demo        boilerplate, preflight, host layer, compose platform
# Every step is idempotent: run it again and site.yml reports changed=0.
# `make demo-clean` (scripts/demo.sh --destroy) removes the node and its generated credentials.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
node=gpuops-demo-node
inventory=inventories/demo/hosts.yml
logs=build/logs
creds=build/demo-credentials/$node
project=gpuops
mkdir -p "$logs"

if [ "${1:-}" = "--destroy" ]; then
  ansible-playbook playbooks/demo_node.yml -e demo_state=absent >"$logs/demo-destroy.log" 2>&1 || {
    tail -20 "$logs/demo-destroy.log" >&2
    echo "demo: ERROR: could not remove $node (log: $logs/demo-destroy.log)" >&2
    exit 1
  }
  rm -rf build/demo-credentials
  echo "demo: removed the node $node and its credentials (build/demo-credentials)"
  exit 0
fi

timings=()
started=$SECONDS

# Compact progress from an ansible-playbook log: play names, and each task that changed or failed.
progress() {
  awk '
    /^PLAY \[/ && !/RECAP/ { line = $0; sub(/ \*+$/, "", line); print "  " line; fflush(); next }
    /^TASK \[/ { task = $0; sub(/^TASK \[/, "", task); sub(/\] \*+$/, "", task); shown = 0; next }
    /^changed:/ { if (!shown) { print "    changed  " task; shown = 1; fflush() } next }
    /^(fatal|failed):/ { if (!shown) { print "    FAILED   " task; shown = 1; fflush() } next }
  '
}

# Show why a step failed: the first error and what follows it, else the log's tail.
explain_failure() {
  local log=$1 first
  first=$(grep -nE '^(fatal|failed):|ERROR!|^\[ERROR\]' "$log" | head -1 | cut -d: -f1 || true)
  echo "---- $log (last relevant lines) ----" >&2
  if [ -n "$first" ]; then sed -n "$((first > 3 ? first - 3 : 1)),$((first + 30))p" "$log" >&2; else tail -30 "$log" >&2; fi
  echo "----" >&2
}

# run_step NAME LOG COMMAND...: run an ansible-playbook, full output to LOG, progress and recap on screen.
run_step() {
  local name=$1 log=$2 t0=$SECONDS rc
  shift 2
  echo "demo: [$name] $* (log: $log)"
  set +e
  "$@" 2>&1 | tee "$log" | progress
  rc=${PIPESTATUS[0]}
  set -e
  timings+=("$(printf '%-8s %5ss' "$name" $((SECONDS - t0)))")
  grep -A6 '^PLAY RECAP' "$log" | grep -E '^[^ ].* : ok=' | sed "s/^/  recap: /" || true
  if [ "$rc" -ne 0 ]; then
    explain_failure "$log"
    echo "demo: FAILED in step '$name' (ansible-playbook exit $rc); full log: $root/$log" >&2
    exit "$rc"
  fi
}

run_step node "$logs/demo-node.log" ansible-playbook playbooks/demo_node.yml
# --flush-cache: the node may be new, so its facts are read afresh, not taken from .cache/facts.
run_step images "$logs/demo-images.log" ansible-playbook -i "$inventory" --flush-cache molecule/resources/local_images.yml
run_step site "$logs/demo-site.log" ansible-playbook -i "$inventory" site.yml

# What preflight and the host layer decided, from this run's log.
echo
echo "== decisions (from $logs/demo-site.log)"
grep -oE '[^" ]+: platform [a-z]+ \([a-z]+\), [0-9]+ GPUs via [a-z-]+|skipped: no GPU on [^"]*' "$logs/demo-site.log" \
  | sed 's/^/  /' || true

# The stack's endpoints: every published port, and a command that proves the service answers.
echo
echo "== the stack on $node (compose project '$project'; every port is bound to the node's 127.0.0.1)"
ps_json=$(docker exec "$node" docker compose -p "$project" ps --all --format json)
mlflow_auth="-u \"admin:\$(cat $root/$creds/mlflow_admin_password)\""
PS_JSON=$ps_json NODE=$node MLFLOW_AUTH=$mlflow_auth python3 - <<'EOF'
import json
import os

node = os.environ["NODE"]
auth = os.environ["MLFLOW_AUTH"]
text = os.environ["PS_JSON"].strip()
rows = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines() if line.strip()]
# How to prove each service answers, after `curl -s` (the path, then a filter on the node's output).
probes = {
    "prometheus": ("/-/ready", ""),
    "alertmanager": ("/-/ready", ""),
    "node-exporter": ("/metrics", " | grep -m2 '^node_load'"),
    "dcgm-exporter": ("/metrics", " | grep -m2 '^DCGM_FI_DEV_GPU_TEMP'"),
    "mlflow": ("/api/2.0/mlflow/experiments/search?max_results=1", ""),
    "grafana": ("/api/health", ""),
}
for row in sorted(rows, key=lambda r: r.get("Service", "")):
    service = row.get("Service", "?")
    ports = sorted({(p.get("URL"), p.get("PublishedPort")) for p in row.get("Publishers") or [] if p.get("PublishedPort")})
    state = row.get("Health") or row.get("State", "")
    if not ports:
        print(f"  {service:<14} {state:<10} (no published port)")
        continue
    for url, port in ports:
        path, filt = probes.get(service, ("/", ""))
        extra = f"{auth} " if service == "mlflow" else ""
        print(f"  {service:<14} {state:<10} http://{url}:{port}")
        print(f"      docker exec {node} curl -s {extra}'http://127.0.0.1:{port}{path}'{filt}")
EOF

# Prove it: run the probes now and show what they answer.
echo
echo "== probes (run just now)"
probe() {
  local label=$1 out
  shift
  if out=$(docker exec "$node" "$@" 2>&1); then
    printf '  %-34s %s\n' "$label" "$(echo "$out" | head -2 | tr '\n' ' ' | cut -c1-110)"
  else
    printf '  %-34s FAILED: %s\n' "$label" "$(echo "$out" | tail -1)"
  fi
}
probe "prometheus /-/ready" curl -sf http://127.0.0.1:9090/-/ready
probe "alertmanager /-/ready" curl -sf http://127.0.0.1:9093/-/ready
probe "node-exporter /metrics" sh -c "curl -sf http://127.0.0.1:9100/metrics | grep -m1 '^node_load1'"
probe "dcgm-exporter (stand-in) /metrics" sh -c "curl -sf http://127.0.0.1:9400/metrics | grep -m1 '^DCGM_FI_DEV_GPU_TEMP'"
probe "mlflow without credentials" curl -s -o /dev/null -w 'HTTP %{http_code} (refused, as it should be)' \
  'http://127.0.0.1:5000/api/2.0/mlflow/experiments/search?max_results=1'
probe "mlflow as admin (password file)" sh -c "curl -sf -u 'admin:$(cat "$creds/mlflow_admin_password")' \
  'http://127.0.0.1:5000/api/2.0/mlflow/experiments/search?max_results=5' \
  | python3 -c 'import json,sys; print(\"experiments:\", [e[\"name\"] for e in json.load(sys.stdin)[\"experiments\"]])'"
probe "prometheus scrapes (targets up)" sh -c \
  "curl -sf 'http://127.0.0.1:9090/api/v1/query?query=up' | python3 -c 'import json,sys; r=json.load(sys.stdin)[\"data\"][\"result\"]; print(\", \".join(sorted(x[\"metric\"][\"job\"]+\"=\"+x[\"value\"][1] for x in r)))'"

echo
echo "== docker compose ps (on $node)"
docker exec "$node" docker compose -p "$project" ps --format 'table {{.Service}}\t{{.Image}}\t{{.Status}}\t{{.Ports}}' | sed 's/^/  /'

# This run's preflight report (preflight writes reports/<UTC timestamp>/<host>.md).
latest=$(grep -oE 'report: [^ ]+/'"$node"'\.md' "$logs/demo-site.log" | tail -1 | cut -d' ' -f2 || true)
if [ -z "$latest" ]; then latest=$(ls -td reports/*/ 2>/dev/null | head -1 || true)${node}.md; fi
echo
echo "== preflight report: $latest"
if [ -f "$latest" ]; then sed 's/^/  /' "$latest"; else echo "  (not found)"; fi

echo
echo "== timings"
for t in "${timings[@]}"; do echo "  $t"; done
printf '  %-8s %5ss\n' total $((SECONDS - started))
echo
echo "demo: done. Logs: $logs/demo-{node,images,site}.log. Credentials (0600): $creds/"
echo "demo: the node stays up for inspection: docker exec -it $node bash; remove it with make demo-clean"

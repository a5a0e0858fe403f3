#!/usr/bin/env bash
# The test runner behind `make test`: lint -> unit -> collection -> molecule.
# Every stage runs even when an earlier one failed, so one run shows everything;
# the closing line is the plain "summary: N passed, N failed" form.
# Usage: run-tests.sh all | lint | unit | collection | report | ops | bad_input | dnf | site_check | molecule [scenario...]
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# Tests start from no cached facts: ansible.cfg's jsonfile cache would let a role that
# forgets to gather facts pass here and fail on a fresh controller.
export ANSIBLE_CACHE_PLUGIN=memory
mkdir -p build/logs build/junit
passed=0
failed=0
failures=()

ok()   { passed=$((passed + ${2:-1})); echo "  ok    $1"; }
bad()  { failed=$((failed + ${2:-1})); failures+=("$1"); echo "  FAIL  $1"; }
# check NAME LOG CMD...: run CMD with output to LOG, count one pass or fail.
check() {
  local name=$1 log=$2; shift 2
  if "$@" >"$log" 2>&1; then ok "$name"; else bad "$name (log: $log)"; tail -40 "$log" | sed 's/^/        /'; fi
}
# junit_counts FILE -> "passed failed" (skipped tests count as neither)
junit_counts() {
  python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("0 0"); sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
t = f = s = 0
for su in suites:
    t += int(su.get("tests", 0)); s += int(su.get("skipped", 0))
    f += int(su.get("failures", 0)) + int(su.get("errors", 0))
print(t - f - s, f)
PY
}
stage_start() { echo "== $1"; stage_t0=$(date +%s); }
stage_end() { echo "   ($1 took $(( $(date +%s) - stage_t0 )) s)"; }

lint() {
  stage_start lint
  check "yamllint (strict)" build/logs/yamllint.log yamllint --strict .
  check "ruff check" build/logs/ruff.log ruff check .
  check "ansible-lint (production profile)" build/logs/ansible-lint.log ansible-lint --profile production --offline
  check "role and module pages match their sources (make docs)" build/logs/role-docs.log python scripts/gen-role-docs --check
  check "relative links in README.md and docs/ resolve; every role and module has a page" build/logs/links.log \
    python scripts/check-links
  check "changelog fragments (antsibull-changelog lint)" build/logs/changelog.log antsibull-changelog lint
  check "ansible-test sanity (ignores: tests/sanity/ignore-2.19.txt)" build/logs/sanity.log scripts/sanity.sh
  stage_end lint
}

unit() {
  stage_start unit
  rm -f build/junit/unit.xml
  pytest -q -p no:cacheprovider --junitxml=build/junit/unit.xml tests/unit >build/logs/unit.log 2>&1
  local rc=$? counts
  counts=$(junit_counts build/junit/unit.xml)
  tail -3 build/logs/unit.log | sed 's/^/        /'
  passed=$((passed + ${counts% *})); failed=$((failed + ${counts#* }))
  if [ "$rc" -ne 0 ]; then
    [ "${counts#* }" -gt 0 ] || { failed=$((failed + 1)); }
    failures+=("unit tests (log: build/logs/unit.log)"); grep -E '^(FAILED|ERROR)' build/logs/unit.log | head -30 | sed 's/^/        /'
  fi
  # playbooks/render.yml on inventories/cluster, every object validated strictly (its own pytest session:
  # tests/render has its own conftest).
  rm -f build/junit/render.xml
  pytest -q -p no:cacheprovider --junitxml=build/junit/render.xml tests/render >build/logs/render.log 2>&1
  rc=$?
  counts=$(junit_counts build/junit/render.xml)
  tail -2 build/logs/render.log | sed 's/^/        /'
  passed=$((passed + ${counts% *})); failed=$((failed + ${counts#* }))
  if [ "$rc" -ne 0 ]; then
    [ "${counts#* }" -gt 0 ] || { failed=$((failed + 1)); }
    failures+=("render tests (log: build/logs/render.log)"); grep -E '^(FAILED|ERROR)' build/logs/render.log | head -30 | sed 's/^/        /'
  fi
  stage_end unit
}

# Tests outside tests/unit that need the host set-up (bootstrap.sh): pytest per folder, JUnit into build/junit.
pytest_stage() {
  local name=$1 dir=$2 rc counts
  stage_start "$name"
  rm -f "build/junit/$name.xml"
  pytest -q -p no:cacheprovider --junitxml="build/junit/$name.xml" "$dir" >"build/logs/$name.log" 2>&1
  rc=$?
  counts=$(junit_counts "build/junit/$name.xml")
  tail -3 "build/logs/$name.log" | sed 's/^/        /'
  passed=$((passed + ${counts% *})); failed=$((failed + ${counts#* }))
  if [ "$rc" -ne 0 ]; then
    [ "${counts#* }" -gt 0 ] || { failed=$((failed + 1)); }
    failures+=("$name tests (log: build/logs/$name.log)"); grep -E '^(FAILED|ERROR)' "build/logs/$name.log" | head -30 | sed 's/^/        /'
  fi
  stage_end "$name"
}

# gpuops-run and validate.yml against the demo node: one container for every test, under the demo's lock.
ops() {
  local fd
  exec {fd}>/tmp/gpuops-molecule-demo.lock
  flock "$fd"
  pytest_stage ops tests/ops
  flock -u "$fd"
  exec {fd}>&-
}

# The bad-input matrix on its own container (gpuops-bad-input-node), under its lock.
bad_input() {
  local fd
  exec {fd}>/tmp/gpuops-bad-input.lock
  flock "$fd"
  pytest_stage bad_input tests/bad_input
  flock -u "$fd"
  exec {fd}>&-
}

# The dnf path of _pinned_packages for real, on its own container (gpuops-dnf-node), under its lock.
dnf_path() {
  local fd
  exec {fd}>/tmp/gpuops-dnf.lock
  flock "$fd"
  pytest_stage dnf tests/dnf
  flock -u "$fd"
  exec {fd}>&-
}

# site.yml --check on inventories/cluster against four Debian 13 containers (tests/site_check), under its lock.
site_check() {
  local fd
  exec {fd}>/tmp/gpuops-site-check.lock
  flock "$fd"
  pytest_stage site_check tests/site_check
  flock -u "$fd"
  exec {fd}>&-
}

collection() {
  stage_start collection
  local tmp; tmp=$(mktemp -d)
  check "ansible-galaxy collection build" build/logs/collection-build.log \
    ansible-galaxy collection build --force --output-path build .
  local tarball; tarball=$(ls -t build/gpuops-cluster-*.tar.gz 2>/dev/null | head -1)
  # A clean collections path and an empty config: only the installed tarball can answer.
  local clean=(env ANSIBLE_COLLECTIONS_PATH="$tmp" ANSIBLE_CONFIG="$tmp/ansible.cfg")
  : >"$tmp/ansible.cfg"
  check "collection installs on a clean collections path" build/logs/collection-install.log \
    "${clean[@]}" ansible-galaxy collection install --offline --force -p "$tmp" "${tarball:-missing-tarball}"
  check "installed collection: ansible-doc lists gpuops.cluster modules" build/logs/collection-doc.log \
    "${clean[@]}" bash -c 'out=$(ansible-doc -t module -l gpuops.cluster) && echo "$out" && grep -q "^gpuops.cluster.gpu_facts" <<<"$out"'
  check "installed collection: gpu_facts runs on this host" build/logs/collection-run.log \
    "${clean[@]}" ansible localhost -c local -m gpuops.cluster.gpu_facts
  check "in place: ansible-doc renders every module and filter" build/logs/ansible-doc.log scripts/check-docs.sh
  rm -rf "$tmp"
  stage_end collection
}

molecule_scenarios() {
  local names=("$@") s
  if [ ${#names[@]} -eq 0 ]; then
    for s in molecule/*/molecule.yml; do names+=("$(basename "$(dirname "$s")")"); done
  fi
  for s in "${names[@]}"; do
    stage_start "molecule $s"
    [ -f "molecule/$s/molecule.yml" ] || { bad "molecule $s (no molecule/$s/molecule.yml)"; continue; }
    rm -f "build/junit/molecule-$s.xml"
    # Keep Molecule's state in this checkout: its default (~/.ansible/tmp, keyed by the
    # folder's name) is shared by every clone called "main".
    if MOLECULE_EPHEMERAL_DIRECTORY="$root/build/molecule/$s" molecule test -s "$s" >"build/logs/molecule-$s.log" 2>&1; then
      ok "molecule $s: create, converge, idempotence, verify, destroy"
    else
      bad "molecule $s (log: build/logs/molecule-$s.log)"
      grep -nE 'fatal:|FAILED|ERROR|failed=[1-9]|changed=[1-9]' "build/logs/molecule-$s.log" | tail -30 | sed 's/^/        /'
    fi
    local counts; counts=$(junit_counts "build/junit/molecule-$s.xml")
    passed=$((passed + ${counts% *})); failed=$((failed + ${counts#* }))
    echo "        testinfra: ${counts% *} passed, ${counts#* } failed"
    stage_end "molecule $s"
  done
}

t0=$(date +%s)
what=${1:-all}; shift || true
case "$what" in
  lint) lint ;;
  unit) unit ;;
  collection) collection ;;
  report) pytest_stage report tests/report ;;
  # gpuops-run and validate.yml against the demo node: one container, under the demo's lock.
  ops) ops ;;
  # The bad-input matrix: one container, every case refused before any change (tests/bad_input).
  bad_input) bad_input ;;
  # _pinned_packages' dnf path on a labelled dnf stand-in: a signed RPM repository, install, lock, verify (tests/dnf).
  dnf) dnf_path ;;
  # site.yml --check on the Kubernetes worked site: stops nowhere unexpectedly (tests/site_check).
  site_check) site_check ;;
  molecule) molecule_scenarios "$@" ;;
  all) lint; unit; collection; pytest_stage report tests/report; ops; bad_input; dnf_path; site_check; molecule_scenarios ;;
  *) echo "usage: $0 all|lint|unit|collection|report|ops|bad_input|dnf|site_check|molecule [scenario...]" >&2; exit 2 ;;
esac
echo
echo "== total time $(( $(date +%s) - t0 )) s"
for f in "${failures[@]}"; do echo "failed: $f"; done
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ $((passed + failed)) -gt 0 ]

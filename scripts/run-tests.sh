#!/usr/bin/env bash
# The test runner behind `make test`. Every stage runs even when an earlier one failed, so one run shows
# everything. Each stage's output goes to its own log (build/logs/stage-<stage>.log), its counts to
# build/results/<stage>.json; the run ends with the failures, the skips per stage with their reasons, and the
# closing line "summary: N passed, N failed, N skipped"; build/test-summary.json records the run (format:
# docs/testing.md). Exit status: non-zero when anything failed or nothing ran.
# Usage:
#   run-tests.sh all                    every stage, two at a time: two lanes take from one queue (ALL_QUEUE
#                                       below), or run the fixed lanes GPUOPS_TEST_LANES names
#   run-tests.sh lint | unit | collection | report | ops | bad_input | dnf | site_check
#                                       one stage, its output live
#   run-tests.sh molecule [scenario...] Molecule scenarios in series (every one without names), output live
#   run-tests.sh plan                   print the queue (or the lanes) `all` would run, and run nothing
#   run-tests.sh lanes LANE [LANE...]   the stages named, through the scheduler `all` uses: a LANE is a
#                                       comma-separated list of stages run in series; the lanes run at the same
#                                       time, each stage printed whole when it ends. Stage names: the ones above
#                                       and molecule-<scenario>. Example: run-tests.sh lanes lint,unit report,collection
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# Tests start from no cached facts: ansible.cfg's jsonfile cache would let a role that
# forgets to gather facts pass here and fail on a fresh controller.
export ANSIBLE_CACHE_PLUGIN=memory
mkdir -p build/logs build/junit build/results
results() { python3 "$root/scripts/test_summary.py" "$@"; }

# The work of `all`: a queue that two lanes take from, each lane taking the next item whenever it is free, so
# the lanes stay even when stage times differ from one machine to the next (cold, warm, a slower disk). An item
# is stages run in series in one lane. The driver scenario, which mostly waits on downloads, dpkg and container
# boots, starts at once beside the CPU-bound unit stage (on a fresh machine it first builds the images, below).
# compose shares the host's image cache with ops (the demo node), so both are one item (and both take the demo's
# lock as well), and bad_input follows them in it: bad_input runs its cases several playbooks at a time, and
# beside compose both slowed down (seen in the full run of 3c4fd16, compared with earlier runs' stage times). That
# item is the longest by far, so the lane that takes it gets only unit before it: with lint as well it ended ~300 s
# after the other lane (the runs of d385bf6 and 14a8f83); lint goes to the other lane, and the short stages fill
# the ends. Containers, names and locks of two stages never overlap. A stage not named here (a new scenario) is
# added as an item of its own at the end (check_lanes).
ALL_QUEUE=(
  molecule-driver
  unit
  ops,molecule-compose,bad_input
  lint
  molecule-kubernetes
  molecule-health
  molecule-grow
  site_check
  molecule-preflight
  dnf
  molecule-local_pv
  collection
  report
)
LANES=2
scenarios=()
for s in molecule/*/molecule.yml; do scenarios+=("$(basename "$(dirname "$s")")"); done
ALL_STAGES=(lint unit collection report ops bad_input dnf site_check "${scenarios[@]/#/molecule-}")

# Per-stage counters: reset by run_stage, written to build/results/<stage>.json when the stage ends.
passed=0
failed=0
stage_rc=0
failures=()
junits=()

ok()   { passed=$((passed + ${2:-1})); echo "  ok    $1"; }
bad()  { failed=$((failed + ${2:-1})); failures+=("$1"); echo "  FAIL  $1"; }
# note_rc RC: the stage's rc is the exit status of its first failing command.
note_rc() { [ "$1" -eq 0 ] || [ "$stage_rc" -ne 0 ] || stage_rc=$1; }
# check NAME LOG CMD...: run CMD with output to LOG, count one pass or fail.
check() {
  local name=$1 log=$2 rc; shift 2
  "$@" >"$log" 2>&1; rc=$?
  note_rc "$rc"
  if [ "$rc" -eq 0 ]; then ok "$name"; else bad "$name (log: $log)"; tail -40 "$log" | sed 's/^/        /'; fi
}
# pytest_run NAME JUNIT LOG ARGS...: pytest with JUnit; its tests are counted from the JUnit file (with the
# skips and their reasons); a failing run that recorded no failure (a crash, nothing collected) counts one.
pytest_run() {
  local name=$1 junit=$2 log=$3 rc counts; shift 3
  rm -f "$junit"
  pytest -q -p no:cacheprovider --junitxml="$junit" "$@" >"$log" 2>&1; rc=$?
  note_rc "$rc"
  junits+=("$junit")
  counts=$(results counts "$junit")
  tail -3 "$log" | sed 's/^/        /'
  if [ "$rc" -ne 0 ]; then
    read -r _ f _ <<<"$counts"
    [ "$f" -gt 0 ] || failed=$((failed + 1))
    failures+=("$name (log: $log)"); grep -E '^(FAILED|ERROR)' "$log" | head -30 | sed 's/^/        /'
  fi
}

lint() {
  check "yamllint (strict)" build/logs/yamllint.log yamllint --strict .
  check "ruff check" build/logs/ruff.log ruff check .
  check "ansible-lint (production profile)" build/logs/ansible-lint.log ansible-lint --profile production --offline
  check "role and module pages match their sources (make docs)" build/logs/role-docs.log python scripts/gen-role-docs --check
  check "relative links in README.md and docs/ resolve; every role and module has a page" build/logs/links.log \
    python scripts/check-links
  check "changelog fragments (antsibull-changelog lint)" build/logs/changelog.log antsibull-changelog lint
  check "ansible-test sanity (ignores: tests/sanity/ignore-2.19.txt)" build/logs/sanity.log scripts/sanity.sh
}

unit() {
  pytest_run "unit tests" build/junit/unit.xml build/logs/unit.log tests/unit
  # playbooks/render.yml on inventories/cluster, every object validated strictly (its own pytest session:
  # tests/render has its own conftest).
  pytest_run "render tests" build/junit/render.xml build/logs/render.log tests/render
}

# with_lock LOCKFILE CMD...: CMD under an exclusive flock (the node containers a stage owns, across checkouts);
# returns CMD's exit status.
with_lock() {
  local fd rc lock=$1; shift
  exec {fd}>"$lock"
  flock "$fd"
  "$@"; rc=$?
  flock -u "$fd"
  exec {fd}>&-
  return "$rc"
}

# images LOG: the debootstrap node images (scripts/build-images.sh: rebuilt only when its recipe changed, else a
# no-op), under one lock, for a stage that starts containers. `make test` does not wait for them: on a fresh
# machine the first such stage builds them while the other lane runs unit or lint.
images() {
  with_lock /tmp/gpuops-images.lock scripts/build-images.sh all >"$1" 2>&1 && return
  bad "the node images (scripts/build-images.sh; log: $1)"; note_rc 1; tail -20 "$1" | sed 's/^/        /'; return 1
}

# Tests outside tests/unit that need the host set-up (bootstrap.sh): pytest per folder.
pytest_stage() { pytest_run "$1 tests" "build/junit/$1.xml" "build/logs/$1.log" "$2"; }

collection() {
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
}

molecule_scenario() {
  local s=$1 rc p f s_ junit="build/junit/molecule-$1.xml"
  [ -f "molecule/$s/molecule.yml" ] || { bad "molecule $s (no molecule/$s/molecule.yml)"; note_rc 2; return; }
  rm -f "$junit"
  # Keep Molecule's state in this checkout: its default (~/.ansible/tmp, keyed by the
  # folder's name) is shared by every clone called "main".
  MOLECULE_EPHEMERAL_DIRECTORY="$root/build/molecule/$s" molecule test -s "$s" >"build/logs/molecule-$s.log" 2>&1
  rc=$?
  note_rc "$rc"
  if [ "$rc" -eq 0 ]; then
    # The steps as Molecule ran them (its test_sequence: grow and health have no idempotence step of their own).
    ok "molecule $s: $(sed -n 's/.*scenario test matrix: //p' "build/logs/molecule-$s.log" | head -1)"
  else
    bad "molecule $s (log: build/logs/molecule-$s.log)"
    grep -nE 'fatal:|FAILED|ERROR|failed=[1-9]|changed=[1-9]' "build/logs/molecule-$s.log" | tail -30 | sed 's/^/        /'
  fi
  junits+=("$junit")
  read -r p f s_ <<<"$(results counts "$junit")"
  echo "        testinfra: $p passed, $f failed, $s_ skipped"
}

# run_stage NAME LANE: one stage, with its own counters; its result goes to build/results/NAME.json.
run_stage() {
  local name=$1 lane=$2 t0 args=() j f body=$1
  passed=0 failed=0 stage_rc=0 failures=() junits=()
  t0=$(date +%s)
  rm -f "build/results/$name.json"
  echo "== $name"
  case "$name" in
    lint|unit|collection|report) ;;
    *) images "build/logs/images-$name.log" || body=none ;;  # counted as a failure of this stage
  esac
  case "$body" in
    none) ;;
    lint) lint ;;
    unit) unit ;;
    collection) collection ;;
    # The fleet report in headless Chromium. Without chromium every test of it skips, with the reason; under
    # CI=true each of those skips fails (tests/ci_skips.py), and so does a stage skipped whole (test_summary.py).
    report) pytest_stage report tests/report ;;
    # gpuops-run and validate.yml against the demo node: one container, under the demo's lock.
    ops) with_lock /tmp/gpuops-molecule-demo.lock pytest_stage ops tests/ops ;;
    # The bad-input matrix: one container (gpuops-bad-input-node), every case refused before any change.
    bad_input) with_lock /tmp/gpuops-bad-input.lock pytest_stage bad_input tests/bad_input ;;
    # _pinned_packages' dnf path on a labelled dnf stand-in (gpuops-dnf-node): a signed RPM repository,
    # install, lock, verify.
    dnf) with_lock /tmp/gpuops-dnf.lock pytest_stage dnf tests/dnf ;;
    # site.yml --check on inventories/cluster against four Debian 13 containers (gpuops-site-check-*).
    site_check) with_lock /tmp/gpuops-site-check.lock pytest_stage site_check tests/site_check ;;
    # compose's node shares the host's image cache (/var/cache/gpuops/molecule-compose) with the demo node.
    molecule-compose) with_lock /tmp/gpuops-molecule-demo.lock molecule_scenario compose ;;
    # Each other scenario under a lock of its own: its containers have fixed names, shared by every checkout.
    molecule-*) with_lock "/tmp/gpuops-molecule-${name#molecule-}.lock" molecule_scenario "${name#molecule-}" ;;
    *) bad "$name: no such stage"; note_rc 2 ;;
  esac
  [ "$failed" -eq 0 ] || [ "$stage_rc" -ne 0 ] || stage_rc=1
  echo "   ($name took $(( $(date +%s) - t0 )) s)"
  for j in "${junits[@]}"; do args+=(--junit "$j"); done
  for f in "${failures[@]}"; do args+=(--failure "$name: $f"); done
  results stage "$name" --rc "$stage_rc" --seconds $(( $(date +%s) - t0 )) --passed "$passed" --failed "$failed" \
    --lane "$lane" --log "build/logs/stage-$name.log" "${args[@]}"
}

# Stop the lanes' process trees on INT/TERM (a CI time-out): no stage keeps running after the runner is gone.
lane_pids=()
kill_tree() { local c; for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$c"; done; kill "$1" 2>/dev/null; }
stop_lanes() { local p; for p in "${lane_pids[@]}"; do kill_tree "$p"; done; exit 130; }

# run_lanes LANE...: one lane runs its stages in series, live; several run at the same time, each stage's
# output buffered in its log and printed whole (under a lock) when it ends.
run_lanes() {
  local i=0 lane s
  if [ $# -eq 1 ]; then
    IFS=, read -ra stages <<<"$1"
    for s in "${stages[@]}"; do run_stage "$s" 1 2>&1 | tee "build/logs/stage-$s.log"; done
    return
  fi
  trap stop_lanes INT TERM
  for lane in "$@"; do
    i=$((i + 1))
    echo "== lane $i: ${lane//,/ }"
    run_buffered "$i" "$lane" &
    lane_pids+=($!)
  done
  wait "${lane_pids[@]}"
  trap - INT TERM
}

# run_buffered, run_queue ITEM... (the queue of `all`) and next_item.
# shellcheck source=scripts/_queue.sh
source "$root/scripts/_queue.sh"

# check_lanes COMPLETE LANE...: refuse an unknown or repeated stage (a stage run twice at once would share its
# containers); with COMPLETE=yes add every stage of ALL_STAGES not named to the last lane, with COMPLETE=items
# as an item of its own at the end (the queue), so that `all` never drops one. Prints the lanes (or items), one
# a line.
check_lanes() {
  local complete=$1 lane s n; shift
  local -A seen=()
  local lanes=("$@")
  for lane in "${lanes[@]}"; do
    IFS=, read -ra stages <<<"$lane"
    for s in "${stages[@]}"; do
      case " ${ALL_STAGES[*]} " in *" $s "*) ;; *)
        [[ $s == molecule-* ]] || { echo "run-tests.sh: unknown stage '$s'; stages: ${ALL_STAGES[*]}" >&2; return 2; } ;;
      esac
      [ -z "${seen[$s]:-}" ] || { echo "run-tests.sh: stage '$s' is named twice; each stage runs once" >&2; return 2; }
      seen[$s]=1
    done
  done
  if [ "$complete" = yes ]; then
    n=$((${#lanes[@]} - 1))
    for s in "${ALL_STAGES[@]}"; do [ -n "${seen[$s]:-}" ] || lanes[n]+=",$s"; done
  elif [ "$complete" = items ]; then
    for s in "${ALL_STAGES[@]}"; do [ -n "${seen[$s]:-}" ] || lanes+=("$s"); done
  fi
  printf '%s\n' "${lanes[@]}"
}

t0=$(date +%s)
load0=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
cpu0=$(head -1 /proc/stat 2>/dev/null || true)
# How fast the machine is now (a fixed single-thread workload, before any stage starts; again at the end).
probe0=$(results probe 2>/dev/null || true)
what=${1:-all}; shift || true
queued=no
case "$what" in
  all|plan)
    if [ -n "${GPUOPS_TEST_LANES:-}" ]; then
      read -ra want <<<"$GPUOPS_TEST_LANES"
      mapfile -t lanes < <(check_lanes yes "${want[@]}")
    else
      mapfile -t lanes < <(check_lanes items "${ALL_QUEUE[@]}")
      queued=yes
    fi
    [ ${#lanes[@]} -gt 0 ] || exit 2
    if [ "$what" = plan ]; then
      [ "$queued" = no ] || { echo "queue ($LANES lanes, each taking the next item when free):"; printf 'item: %s\n' "${lanes[@]}"; exit 0; }
      printf 'lane: %s\n' "${lanes[@]}"; exit 0
    fi ;;
  lanes)
    [ $# -gt 0 ] || { echo "usage: $0 lanes STAGE[,STAGE...] [STAGE[,STAGE...]...]" >&2; exit 2; }
    mapfile -t lanes < <(check_lanes no "$@") ;;
  molecule)
    names=("$@"); [ ${#names[@]} -gt 0 ] || names=("${scenarios[@]}")
    lanes=("$(IFS=,; echo "${names[*]/#/molecule-}")") ;;
  lint|unit|collection|report|ops|bad_input|dnf|site_check) lanes=("$what") ;;
  *) echo "usage: $0 all|plan|lint|unit|collection|report|ops|bad_input|dnf|site_check|molecule [scenario...]|lanes LANE..." >&2
     exit 2 ;;
esac
[ ${#lanes[@]} -gt 0 ] || exit 2
# run_queue leaves in `lanes` what each lane ran, in order.
if [ "$queued" = yes ]; then run_queue "${lanes[@]}"; else run_lanes "${lanes[@]}"; fi

# The stages in the order of ALL_STAGES (then any other, as named), for the summary.
ran=()
for s in "${ALL_STAGES[@]}"; do case ",$(IFS=,; echo "${lanes[*]}")," in *",$s,"*) ran+=("$s") ;; esac; done
for lane in "${lanes[@]}"; do
  IFS=, read -ra stages <<<"$lane"
  for s in "${stages[@]}"; do case " ${ran[*]} " in *" $s "*) ;; *) ran+=("$s") ;; esac; done
done
lane_args=()
for lane in "${lanes[@]}"; do lane_args+=(--lane "$lane"); done
out=build/test-summary.json
[ "$what" = all ] || out=build/test-summary-$what.json
echo
echo "== total time $(( $(date +%s) - t0 )) s (record: $out)"
results summary --command "$what" --started "$t0" --load-start "$load0" --cpu-start "$cpu0" --probe-start "$probe0" --out "$out" "${lane_args[@]}" "${ran[@]}"

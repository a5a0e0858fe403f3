# Sourced by scripts/run-tests.sh (and its unit test, tests/unit/scripts/test_run_tests_queue.py): the queue
# that `run-tests.sh all` runs its stages from, and run_buffered, which run_lanes uses as well. Needs from the
# sourcing script: run_stage NAME LANE, stop_lanes, the arrays lane_pids and lanes, LANES, and build/logs/ in
# the working directory.

# run_buffered LANE STAGE[,STAGE...]: the stages in series, each one's output kept in its log and printed whole
# (under a lock) when it ends, so that two lanes never interleave; run_lanes' lanes and run_queue's items run so.
run_buffered() {
  local lane=$1 s stages
  IFS=, read -ra stages <<<"$2"
  for s in "${stages[@]}"; do
    flock build/.run-tests-print.lock echo "-- $s started (lane $lane)"
    run_stage "$s" "$lane" >"build/logs/stage-$s.log" 2>&1
    flock build/.run-tests-print.lock cat "build/logs/stage-$s.log"
  done
}

# run_queue ITEM...: LANES lanes, each taking the next item of the queue when it is free (under a lock), running
# its stages as run_lanes does; build/.run-tests-lane-N records what lane N ran, for the summary.
run_queue() {
  local i
  queue=("$@")
  echo 0 >build/.run-tests-queue-next
  trap stop_lanes INT TERM
  for ((i = 1; i <= LANES; i++)); do
    : >"build/.run-tests-lane-$i"
    echo "== lane $i: takes the next item of the queue when free"
    (
      while item=$(next_item); do
        echo "$item" >>"build/.run-tests-lane-$i"
        run_buffered "$i" "$item"
      done
    ) &
    lane_pids+=($!)
  done
  wait "${lane_pids[@]}"
  trap - INT TERM
  lanes=()
  for ((i = 1; i <= LANES; i++)); do
    [ ! -s "build/.run-tests-lane-$i" ] || lanes+=("$(paste -sd, "build/.run-tests-lane-$i")")
  done
}

# next_item: the queue's next item (and move past it), or fail when none is left.
next_item() {
  local n
  { flock 9; n=$(<build/.run-tests-queue-next); echo $((n + 1)) >build/.run-tests-queue-next; } 9>build/.run-tests-queue.lock
  [ "$n" -lt "${#queue[@]}" ] || return 1
  echo "${queue[n]}"
}

#!/usr/bin/env bash
# Run one test file (by default the data-parallel one) N times in a row under pytest-xdist and
# count the runs that failed: intermittent failures (a rank dying at teardown) show up as a
# count, not as luck. The summary line gives the load average before and after.
#
#     scripts/loop_tests.sh [N] [test path ...]
#
# Environment: PYTHON (default .venv/bin/python), WORKERS (xdist workers, default 2),
# LOG (a folder for the output of failed runs, default a fresh temporary folder).
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
shift || true
paths=("$@")
[ ${#paths[@]} -eq 0 ] && paths=(tests/estimators/networks/test_data_parallel.py)
python=${PYTHON:-.venv/bin/python}
workers=${WORKERS:-2}
log=${LOG:-$(mktemp -d)}
mkdir -p "$log"
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "loop: $n runs of ${paths[*]} under -n $workers; load before: $(load); failed runs kept in $log"
failed=0
start=$(date +%s)
for i in $(seq 1 "$n"); do
  if ! "$python" -m pytest -q -n "$workers" -p no:cacheprovider -p no:randomly "${paths[@]}" >"$log/run$i.txt" 2>&1; then
    failed=$((failed + 1))
    echo "run $i FAILED: $(grep -E 'passed|failed|error' "$log/run$i.txt" | tail -1)"
    grep -E "terminate called|SIGABRT|signal|ProcessExitedException|Error" "$log/run$i.txt" | head -5
  else
    echo "run $i ok: $(tail -1 "$log/run$i.txt")"
    rm -f "$log/run$i.txt"
  fi
done
echo "loop: $n runs, $failed failed, $(( $(date +%s) - start )) s; load after: $(load)"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# The test command (make test, and .ci/run through it): every package, the
# acceptance tests through the real OpenTofu against real Consul agents.
# Prints one line per top-level test so a reader can see what ran; the
# complete verbose log is kept in bin/test.log and shown on failure.
# A skipped test fails the run: a skip would pass without proving anything.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
log="$root/bin/test.log"
mkdir -p "$root/bin"
cd "$root"
start=$SECONDS
go test -v ${TEST_FLAGS:--count=1 -timeout 45m} ./... >"$log" 2>&1
status=$?
grep -E '^(--- (PASS|FAIL|SKIP)|ok |FAIL|panic:)' "$log"
passed=$(grep -c '^--- PASS' "$log")
failed=$(grep -c '^--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
acc=$(grep -c '^--- PASS: TestAcc' "$log")
echo
echo "tests: $passed passed ($acc acceptance tests through real OpenTofu against real Consul), $failed failed, $skipped skipped in $((SECONDS - start))s; full log: bin/test.log"
if [[ $status -ne 0 ]]; then
  echo; echo "=== failures (from bin/test.log)"
  grep -n -B2 -A40 -E '^\s*--- FAIL|^FAIL|panic:' "$log" | tail -n 400
  exit "$status"
fi
if [[ $skipped -ne 0 ]]; then
  echo "skipped tests are not allowed:" >&2
  grep -A3 '^\s*--- SKIP' "$log" >&2
  exit 1
fi

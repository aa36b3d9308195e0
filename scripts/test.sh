#!/usr/bin/env bash
# The test command (make test, and .ci/run through it): every package of
# both modules (the product's, then the harnesses' in tests/: fault suite,
# deployment and docs checks, dashboard, CLI benchmark), the acceptance
# tests through the real OpenTofu against real Consul agents;
# then the controller's tests that drive the CLI (TestTerraform_*,
# TestApplyGrace_*) once more against the newest supported Consul
# (bin/consul-1.16.3, or CONSUL_BIN_NEWEST), whose watches answer in
# another order than 1.14's: that is where a controller fighting an apply
# shows. Prints one line per top-level test so a reader can see what ran;
# the complete verbose logs are kept in bin/test.log and
# bin/test-consul-newest.log and shown on failure.
# A skipped test fails the run: a skip would pass without proving anything.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
log="$root/bin/test.log"
newest_log="$root/bin/test-consul-newest.log"
newest_bin="${CONSUL_BIN_NEWEST:-$root/bin/consul-1.16.3}"
newest_run='^(TestTerraform_|TestApplyGrace_)'
mkdir -p "$root/bin"
cd "$root"
start=$SECONDS
# Two streams side by side, one package at a time each: two test
# binaries at once, as one `go test ./...` runs on 2 cores. The product's
# module is the longer one (provider, runner, controller: about 600, 430
# and 250 s of the 1,400), so the controller's package runs in the second
# stream, after the harnesses' module (fault suite about 730 s), and the
# two end within a few minutes of each other.
second=./internal/controller/
first=$(go list ./... | grep -vx "github.com/consullock/terraform-provider-consullock/internal/controller")
(
  go -C tests test -p 1 -v ${TEST_FLAGS:--count=1 -timeout 45m} ./...
  harnesses=$?
  go test -p 1 -v ${TEST_FLAGS:--count=1 -timeout 45m} "$second" || exit 1
  exit "$harnesses"
) >"$log.tests" 2>&1 &
tests_pid=$!
# shellcheck disable=SC2086 # one argument per package
go test -p 1 -v ${TEST_FLAGS:--count=1 -timeout 45m} $first >"$log" 2>&1
status=$?
wait "$tests_pid"
tests_status=$?
cat "$log.tests" >>"$log" && rm -f "$log.tests"
[[ $status -eq 0 ]] && status=$tests_status
grep -E '^(--- (PASS|FAIL|SKIP)|ok |FAIL|panic:)' "$log"

echo
newest="$(CHECKPOINT_DISABLE=1 "$newest_bin" version 2>/dev/null | grep -m1 -E '^Consul v[0-9]')"
echo "=== again against $newest_bin (${newest:-missing: run make tools}): go test -run '$newest_run' ./internal/controller/"
if [[ -x "$newest_bin" ]]; then
  CONSUL_BIN="$newest_bin" go test -v ${TEST_FLAGS:--count=1 -timeout 45m} -run "$newest_run" ./internal/controller/ >"$newest_log" 2>&1
  newest_status=$?
  grep -E '^(--- (PASS|FAIL|SKIP)|ok |FAIL|panic:)' "$newest_log"
else
  echo "FAIL: $newest_bin does not exist: run make tools" | tee "$newest_log"
  newest_status=1
fi

count() { grep -cE "$1" "$log" "$newest_log" | awk -F: '{s += $NF} END {print s}'; }
passed=$(count '^--- PASS')
failed=$(count '^--- FAIL')
skipped=$(count '^\s*--- SKIP')
acc=$(grep -c '^--- PASS: TestAcc' "$log")
again=$(grep -c '^--- PASS' "$newest_log")
echo
echo "tests: $passed passed ($acc acceptance tests through real OpenTofu against real Consul; $again controller tests again against ${newest:-Consul 1.16.3}), $failed failed, $skipped skipped in $((SECONDS - start))s; full logs: bin/test.log, bin/test-consul-newest.log"
if [[ $status -ne 0 || $newest_status -ne 0 ]]; then
  echo; echo "=== failures (from bin/test.log and bin/test-consul-newest.log)"
  grep -n -B2 -A40 -E '^\s*--- FAIL|^FAIL|panic:' "$log" "$newest_log" | tail -n 400
  [[ $status -ne 0 ]] && exit "$status"
  exit "$newest_status"
fi
if [[ $skipped -ne 0 ]]; then
  echo "skipped tests are not allowed:" >&2
  grep -A3 '^\s*--- SKIP' "$log" "$newest_log" >&2
  exit 1
fi

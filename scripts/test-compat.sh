#!/usr/bin/env bash
# make test-compat: the acceptance suite (and the other tests that drive the
# CLI) over every supported CLI x Consul pair, each a real binary built from
# its pinned module into bin/. Writes bin/compat/results.md (also printed):
# a test whose feature the CLI cannot have (its skip message starts with
# "not supported by this CLI: ") is reported so, never as passed; any other
# skip or failure fails the run.
#   scripts/test-compat.sh            # the whole matrix
#   COMPAT_CLIS="tofu-1.10.6" COMPAT_CONSULS="consul-1.16.3" scripts/test-compat.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/bin/compat"
mkdir -p "$out"

# bin/ name -> label and the version its `version` must report.
declare -A label=(
  [tofu-1.10.6]="OpenTofu 1.10.6" [tofu]="OpenTofu 1.12.6" [terraform-1.5.7]="Terraform 1.5.7"
  [consul]="Consul 1.14.11" [consul-1.16.3]="Consul 1.16.3"
)
declare -A want=(
  [tofu-1.10.6]="OpenTofu v1.10.6" [tofu]="OpenTofu v1.12.6" [terraform-1.5.7]="Terraform v1.5.7"
  [consul]="Consul v1.14.11" [consul-1.16.3]="Consul v1.16.3"
)
clis=(${COMPAT_CLIS:-tofu-1.10.6 tofu terraform-1.5.7})
consuls=(${COMPAT_CONSULS:-consul consul-1.16.3})
# The provider package runs whole; elsewhere only the tests that drive the CLI.
extra_run='^(TestProviderLogs_|TestSummary_|TestTerraform_|TestApplyGrace_)'
extra_pkgs=(. ./examples/ci/plansummary/ ./internal/controller/)

tools/build.sh "${clis[@]}" "${consuls[@]}" || exit 1
for t in "${clis[@]}" "${consuls[@]}"; do
  # OpenTofu 1.12 prints CLI configuration warnings on stdout first.
  v="$(CHECKPOINT_DISABLE=1 "bin/$t" version 2>/dev/null | grep -m1 -E '^[A-Za-z]+ v[0-9]')"
  if [[ "$v" != "${want[$t]}" ]]; then
    echo "bin/$t reports \"$v\", want \"${want[$t]}\": run tools/build.sh $t" >&2
    exit 1
  fi
done

cells=()
start=$SECONDS
for cli in "${clis[@]}"; do
  # terraform-plugin-testing names the provider under the CLI's default
  # registry host; the provider tests default to OpenTofu's.
  host=registry.opentofu.org
  [[ $cli == terraform-* ]] && host=registry.terraform.io
  for consul in "${consuls[@]}"; do
    log="$out/$cli.$consul.json"
    rm -f "$log"
    cell_start=$SECONDS
    echo "=== ${label[$cli]} x ${label[$consul]}"
    (
      export CONSUL_BIN="$root/bin/$consul" TF_ACC_TERRAFORM_PATH="$root/bin/$cli" TF_ACC_PROVIDER_HOST=$host
      go test -json ${TEST_FLAGS:--count=1 -timeout 45m} ./internal/provider/
      go test -json ${TEST_FLAGS:--count=1 -timeout 45m} -run "$extra_run" "${extra_pkgs[@]}"
    ) >"$log" 2>"$out/$cli.$consul.stderr"
    # One line per finished top-level test, as make test prints.
    jq -r 'select(.Test != null and (.Test | contains("/") | not) and (.Action == "pass" or .Action == "fail" or .Action == "skip"))
      | "    \(.Action) \(.Test) (\(.Elapsed)s)"' "$log" 2>/dev/null | grep -v '^    pass ' || true
    echo "    done in $((SECONDS - cell_start))s"
    cells+=("${label[$cli]}|${label[$consul]}|$log")
  done
done

echo
echo "=== results ($((SECONDS - start))s; logs in bin/compat/)"
go run ./scripts/compat -o "$out/results.md" "${cells[@]}"

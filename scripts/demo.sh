#!/usr/bin/env bash
# make demo: a local Consul dev agent (ACLs on, default deny), the quickstart
# applied with OpenTofu, three `consullock run` workers triggered together
# (exactly one runs the night's job), then a run whose holder is killed
# mid-run (the holder shown through the data source, the take-over
# measured, the run completed by another worker as attempt 2), an
# out-of-band ACL edit caught by plan, and a deleted lock key put back by
# the controller. Cleans up after itself.
#
# It uses the consul and tofu (or terraform) found on PATH when they are
# recent enough (Consul >= 1.14, OpenTofu >= 1.10, Terraform >= 1.5), and
# builds the pinned ones into bin/ only when none is: a new user sees the
# demo in seconds. DEMO_PINNED=1 always uses the pinned ones.
#   scripts/demo.sh --select   # only print which binaries it would use
set -euo pipefail
here="$0"
[[ "$here" == */* ]] || here="./$here"
root="$(cd "${here%/*}/.." && pwd)" # no dirname: see version_of
bin="$root/bin"
demo="$root/.demo"
t0=$SECONDS
step() { printf '\n==> [%3ss] %s\n' "$((SECONDS - t0))" "$*"; }
info() { printf '    %s\n' "$*"; }

# version_of BIN PRODUCT: the x.y.z BIN reports, if its `version` says
# "PRODUCT vx.y.z..." (a binary of that name that is something else is not
# used); empty otherwise. Bash builtins only (the selection test runs with a
# PATH of fake binaries).
# The first such line counts: OpenTofu 1.12 may print CLI configuration
# warnings on stdout before it.
version_of() {
  local line
  while IFS= read -r line; do
    if [[ "$line" =~ ^$2\ v([0-9]+)\.([0-9]+)\.([0-9]+) ]]; then
      echo "${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.${BASH_REMATCH[3]}"
      return
    fi
  done < <(CHECKPOINT_DISABLE=1 "$1" version 2>/dev/null)
}

# at_least HAVE MIN: compares x.y.z numerically.
at_least() {
  local IFS=. i
  local -a h=($1) m=($2)
  for i in 0 1 2; do
    ((10#${h[i]:-0} > 10#${m[i]:-0})) && return 0
    ((10#${h[i]:-0} < 10#${m[i]:-0})) && return 1
  done
  return 0
}

# find_on_path NAME PRODUCT MIN [MAX]: sets found/found_version to a
# suitable NAME on PATH, and says why one found is not used.
find_on_path() {
  found= found_version=
  [[ "${DEMO_PINNED:-}" == 1 ]] && return 1
  local p v
  p="$(command -v "$1" 2>/dev/null)" || return 1
  v="$(version_of "$p" "$2")"
  if [[ -z "$v" ]]; then
    info "not using $p: its \`$1 version\` does not report $2" >&2
    return 1
  fi
  if ! at_least "$v" "$3"; then
    info "not using $p: $2 $v is older than $3" >&2
    return 1
  fi
  if [[ -n "${4:-}" && "$v" != "$4" ]] && at_least "$v" "$4"; then
    info "not using $p: $2 $v is newer than $4${5:+ ($5)}" >&2
    return 1
  fi
  found=$p found_version=$v
}

# select_tools: sets consul/consul_label, cli/cli_name/cli_label, and
# build (the pinned tools that tools/build.sh must build).
select_tools() {
  build=()
  if find_on_path consul Consul 1.14.0; then
    consul=$found consul_label="Consul $found_version ($found, from PATH)"
  else
    consul="$bin/consul" consul_label="Consul 1.14.11 (pinned, bin/consul)" build+=(consul)
  fi
  if find_on_path tofu OpenTofu 1.10.0; then
    cli=$found cli_name=tofu cli_label="OpenTofu $found_version ($found, from PATH)"
  elif find_on_path terraform Terraform 1.5.0 1.5.7 "the last open-source Terraform; later releases are not used"; then
    cli=$found cli_name=terraform cli_label="Terraform $found_version ($found, from PATH)"
  else
    cli="$bin/tofu" cli_name=tofu cli_label="OpenTofu 1.12.6 (pinned, bin/tofu)" build+=(tofu)
  fi
}

select_tools
if [[ "${1:-}" == --select ]]; then
  echo "consul: $consul_label"
  echo "cli: $cli_label"
  echo "build: ${build[*]:-nothing}"
  exit 0
fi
step "tools: $consul_label, $cli_label"
if [[ ${#build[@]} -gt 0 ]]; then
  info "not found on PATH (or too old): building the pinned ${build[*]} (the first build takes a few minutes)"
  "$root/tools/build.sh" "${build[@]}"
fi

pids=()    # workers, stopped first so they release before the agent goes
agent_pid=
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  [[ -n "$agent_pid" ]] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  rm -rf "$demo"
}
trap cleanup EXIT
rm -rf "$demo" && mkdir -p "$demo/quickstart"

step "starting a Consul dev agent (ACLs enabled, default_policy = deny) on free loopback ports"
(cd "$root" && go build -o "$demo/devagent" ./scripts/devagent)
CONSUL_BIN="$consul" "$demo/devagent" -env-file "$demo/agent.env" -node worker-node-1 >"$demo/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 1 600); do [[ -f "$demo/agent.env" ]] && break; sleep 0.1; done
[[ -f "$demo/agent.env" ]] || { cat "$demo/agent.log"; echo "agent did not start" >&2; exit 1; }
set -a; source "$demo/agent.env"; set +a
info "agent at http://$CONSUL_HTTP_ADDR, node $CONSUL_NODE; the provider uses the management token from CONSUL_HTTP_TOKEN"

# Each CLI resolves consullock/consullock on its own default registry host.
cat >"$demo/cli.rc" <<RC
provider_installation {
  dev_overrides {
    "registry.opentofu.org/consullock/consullock" = "$bin"
    "registry.terraform.io/consullock/consullock" = "$bin"
  }
  direct {}
}
RC
export TF_CLI_CONFIG_FILE="$demo/cli.rc" TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
tf() { (cd "$demo/quickstart" && "$cli" "$@" 2> >(grep -v -e 'Provider development overrides' -e 'dev_overrides' >&2)); }
cp "$root"/examples/quickstart/*.tf "$demo/quickstart/"

step "$cli_name apply examples/quickstart (profile, lock, least-privilege policy and token, holder data source)"
tf apply -auto-approve -no-color -var "worker_node_prefix=worker-" | grep -E '^(consullock_|data\.|Apply complete)' | sed 's/^/    /'
info "worst_case_gap: $(tf output -raw worst_case_gap)"
info "rules granted to the workers' token:"
tf output -raw granted_rules | sed 's/^/      /'

worker_token="$(tf output -raw worker_token)"

# workers TAG ARGS...: starts three workers at once, as each worker's timer
# does at 02:00, each `consullock run -lock nightly-report` with only the
# workers' token. The job prints its run ID, attempt and fencing token;
# attempt 1 of run "crash" sleeps 300s (to be killed), its attempt 2 8s
# (long enough to be shown as the holder), any other run 2s.
workers() {
  local tag=$1 i
  shift
  once=()
  for i in 1 2 3; do
    CONSUL_HTTP_TOKEN="$worker_token" "$bin/consullock" run -lock nightly-report "$@" -- sh -c \
      "echo \"worker $i: running the nightly report, run \$CONSUL_LOCK_RUN_ID attempt \$CONSUL_LOCK_ATTEMPT, fencing token \$CONSUL_LOCK_FENCING_TOKEN\"
       if [ \"\$CONSUL_LOCK_RUN_ID\" = crash ]; then [ \"\$CONSUL_LOCK_ATTEMPT\" = 1 ] && exec sleep 300; exec sleep 8; fi; sleep 2" \
      >"$demo/once-$tag-$i.log" 2>&1 &
    once+=($!)
    pids+=($!)
    disown $! # no "Killed" job notice when the demo kills the holder
  done
}
# report TAG: waits for the three workers; says what each did.
report() {
  local tag=$1 i ran=0
  for i in 1 2 3; do
    while kill -0 "${once[i - 1]}" 2>/dev/null; do sleep 0.05; done
    if grep -q 'running the nightly report' "$demo/once-$tag-$i.log"; then
      ran=$((ran + 1))
      info "$(grep 'running the nightly report' "$demo/once-$tag-$i.log")"
    elif grep -q 'run already succeeded' "$demo/once-$tag-$i.log"; then
      info "worker $i: did not run it, exit 0: $(grep -o 'run already succeeded.*' "$demo/once-$tag-$i.log" |
        sed -n 's/.*\(run_id=[^ ]*\).*\(ran_on=[^ ]*\) \(attempt=[0-9]*\) \(fencing_token=[0-9]*\).*/\1 \2 \3 \4/p')"
    else
      info "worker $i: $(tail -n 1 "$demo/once-$tag-$i.log")"
    fi
  done
  ran_count=$ran
}

step "three workers triggered together (no -run-id: the run ID is today's UTC day), a 2s job"
workers together
report together
[[ $ran_count -eq 1 ]] || { tail -n 5 "$demo"/once-together-*.log; echo "$ran_count workers ran the job, want exactly 1" >&2; exit 1; }
info "exactly one worker ran the job; the others left once its success was recorded"

step "again, for run \"crash\" (-run-id crash): attempt 1 runs long"
workers crash -run-id crash
holder_session() {
  curl -fsS -H "X-Consul-Token: $CONSUL_HTTP_TOKEN" "http://$CONSUL_HTTP_ADDR/v1/kv/jobs/nightly-report/.lock?consistent" |
    sed -n 's/.*"Session": *"\([^"]*\)".*/\1/p'
}
for _ in $(seq 1 200); do [[ -n "$(holder_session)" ]] && grep -q 'attempt 1' "$demo"/once-crash-*.log && break; sleep 0.05; done
[[ -n "$(holder_session)" ]] || { tail -n 20 "$demo"/once-crash-*.log; echo "no worker acquired the lock" >&2; exit 1; }

show_holder() {
  tf apply -refresh-only -auto-approve -no-color >/dev/null
  tf output -no-color holder | sed 's/^/    /'
}
# The fencing token (the Raft index of the holder's acquisition) is what
# the job hands to the systems it writes to; LockIndex is not one.
fencing_token() { tf output -json holder | sed -n 's/.*"fencing_token": *\([0-9]*\).*/\1/p'; }
step "who holds the lock? (data source consullock_lock, after $cli_name apply -refresh-only)"
show_holder
first_token="$(fencing_token)"
holder_pid="$(tf output -json holder | sed -n 's/.*\\"pid\\":\([0-9]*\).*/\1/p')"
victim=
for i in 1 2 3; do [[ "${once[i - 1]}" == "$holder_pid" ]] && victim=$i; done
[[ -n "$victim" ]] || { echo "the holder's pid $holder_pid is none of the workers'" >&2; exit 1; }
info "holder is worker $victim (runner pid $holder_pid); the two others wait"

step "kill -9 worker $victim's runner while attempt 1 runs: its job dies with it; the next worker runs attempt 2"
old_session="$(holder_session)"
kill -KILL "$holder_pid"
killed_at=$(date +%s%N)
for _ in $(seq 1 1200); do
  s="$(holder_session)"
  [[ -n "$s" && "$s" != "$old_session" ]] && break
  sleep 0.05
done
took_ms=$(( ($(date +%s%N) - killed_at) / 1000000 ))
took="$((took_ms / 1000)).$(printf %03d $((took_ms % 1000)))"
[[ -n "$s" && "$s" != "$old_session" ]] || { echo "no take-over" >&2; exit 1; }
info "take-over took ${took}s (Consul ends the session after about 2 x ttl, then lock_delay; declared worst_case_gap: $(tf output -raw worst_case_gap))"
show_holder
second_token="$(fencing_token)"
if [[ -n "$first_token" && -n "$second_token" && "$second_token" -gt "$first_token" ]]; then
  info "fencing token $first_token -> $second_token: the new holder's is greater, so a store that remembers the highest token refuses the old holder"
else
  echo "the fencing token did not grow across the take-over ($first_token -> $second_token)" >&2; exit 1
fi
report crash
grep -q 'attempt 2' "$demo"/once-crash-*.log || { tail -n 5 "$demo"/once-crash-*.log; echo "no worker ran attempt 2" >&2; exit 1; }
info "the run ledger, as consullock status -lock nightly-report shows it:"
{ "$bin/consullock" status -lock nightly-report || true; } | sed -n '/^Runs/,$p' | sed 's/^/    /'

step "drift: an operator widens the workers' ACL policy out of band (consul acl policy update)"
"$consul" acl policy update -name nightly-report-workers \
  -rules 'key_prefix "" { policy = "write" }
session_prefix "" { policy = "write" }' >/dev/null
info "$cli_name plan catches it:"
set +e
tf plan -detailed-exitcode -no-color -var "worker_node_prefix=worker-" >"$demo/plan.txt"
code=$?
set -e
grep -E '^\s+[~+-] |will be updated|Plan:' "$demo/plan.txt" | grep -v 'consullock/consullock in' | head -n 20 | sed 's/^/    /'
[[ $code -eq 2 ]] || { cat "$demo/plan.txt"; echo "expected plan to show drift (exit 2), got $code" >&2; exit 1; }
tf apply -auto-approve -no-color -var "worker_node_prefix=worker-" | grep -E 'Apply complete' | sed 's/^/    /'
info "after apply the rules are the declared ones again:"
"$consul" acl policy read -name nightly-report-workers | sed -n '/^Rules:/,$p' | sed 's/^/      /'

step "an operator deletes the lock key by mistake; consullock controller -mode repair puts it back"
# The workers go first (SIGTERM: the runner stops its command, releases the
# lock, then destroys its session), so that the key is deleted unheld.
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for _ in $(seq 1 100); do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [[ $alive -eq 0 ]] && break
  sleep 0.1
done
"$bin/consullock" controller -mode repair -listen 127.0.0.1:0 >"$demo/controller.log" 2>&1 &
ctl_pid=$!
pids+=("$ctl_pid") # the cleanup trap stops it too
ctl_addr=
for _ in $(seq 1 200); do
  ctl_addr="$(sed -n 's/.*"msg":"serving metrics and health".*"listen":"\([^"]*\)".*/\1/p' "$demo/controller.log")"
  if [[ -n "$ctl_addr" ]] && curl -fsS "http://$ctl_addr/readyz" >/dev/null 2>&1 &&
    curl -fsS "http://$ctl_addr/metrics" 2>/dev/null | grep -x 'consullock_leader 1' >/dev/null; then
    break
  fi
  sleep 0.1
done
curl -fsS "http://$ctl_addr/readyz" >/dev/null 2>&1 || { cat "$demo/controller.log"; echo "the controller did not become ready" >&2; exit 1; }
info "controller (pid $ctl_pid) watching, leader, metrics at http://$ctl_addr/metrics"
deleted_at=$(date +%s%N)
"$consul" kv delete jobs/nightly-report/.lock | sed 's/^/    /'
for _ in $(seq 1 500); do
  curl -fsS -H "X-Consul-Token: $CONSUL_HTTP_TOKEN" "http://$CONSUL_HTTP_ADDR/v1/kv/jobs/nightly-report/.lock?consistent" \
    >"$demo/key.json" 2>/dev/null && break
  sleep 0.01
done
back_ms=$(( ($(date +%s%N) - deleted_at) / 1000000 ))
[[ -s "$demo/key.json" ]] || { cat "$demo/controller.log"; echo "the controller did not recreate the key" >&2; exit 1; }
for _ in $(seq 1 200); do grep -q '"msg":"repaired"' "$demo/controller.log" && break; sleep 0.01; done
info "the controller's log:"
grep '"msg":"repaired"' "$demo/controller.log" | sed 's/^/      /' || true
flags="$(sed -n 's/.*"Flags": *\([0-9]*\).*/\1/p' "$demo/key.json")"
lock_index="$(sed -n 's/.*"LockIndex": *\([0-9]*\).*/\1/p' "$demo/key.json")"
info "jobs/nightly-report/.lock is back ${back_ms} ms after the delete: flags $(printf '0x%016x' "$flags") (api.Lock's), LockIndex $lock_index (Consul's counter, not a fencing token: a re-created key starts again), no holder"
kill -TERM "$ctl_pid"
wait "$ctl_pid" 2>/dev/null || true
info "controller stopped (SIGTERM: it stops acting, releases its leader lock, then destroys its session)"

step "done in $((SECONDS - t0))s; stopping workers and the agent, removing .demo/"

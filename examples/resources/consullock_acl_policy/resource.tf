# Holders of a mutex and a semaphore on the worker-* nodes.
resource "consullock_acl_policy" "nightly_report" {
  name        = "nightly-report-holders"
  description = "Lock holders of the nightly report jobs"

  lock_keys             = ["jobs/nightly-report/.lock"]
  semaphore_prefixes    = ["jobs/reindex"] # jobs/reindex/.lock and jobs/reindex/<session>
  session_node_prefixes = ["worker-"]      # session rules match node names
  read_keys             = ["consul-lock/locks/nightly-report"]
  agent_read            = true # only for `consul lock`, which asks its agent for the node name
}

# Workers of a run_once lock whose waiters queue: its run ledger and
# jobs/nightly-ingest/.queue/, nothing else under the prefix.
resource "consullock_acl_policy" "nightly_ingest" {
  name                  = "nightly-ingest-workers"
  lock_keys             = ["jobs/nightly-ingest/.lock"]
  queue_prefixes        = ["jobs/nightly-ingest"]
  read_keys             = ["consul-lock/locks/nightly-ingest", "consul-lock/session-defaults/fast"]
  run_ledgers           = ["nightly-ingest"]
  session_node_prefixes = ["worker-"]
}

# Workers of a lock with holder_service: service "scheduler" write (and node
# read on worker-*, to find former holders' instances); no node write.
resource "consullock_acl_policy" "scheduler" {
  name                  = "scheduler-workers"
  lock_keys             = ["service/scheduler/.lock"]
  read_keys             = ["consul-lock/locks/scheduler", "consul-lock/session-defaults/fast"]
  holder_services       = ["scheduler"]
  session_node_prefixes = ["worker-"]
}

output "granted_rules" {
  value = consullock_acl_policy.nightly_report.rules
}

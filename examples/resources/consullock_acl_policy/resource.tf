# Lock holders of the nightly report: one mutex and one semaphore, sessions
# only on the worker nodes, and `consul lock` support.
resource "consullock_acl_policy" "nightly_report" {
  name        = "nightly-report-holders"
  description = "Lock holders of the nightly report jobs"

  # `consul lock jobs/nightly-report ...` acquires jobs/nightly-report/.lock.
  lock_keys = ["jobs/nightly-report/.lock"]

  # `consul lock -n 3 jobs/reindex ...` writes jobs/reindex/.lock and
  # jobs/reindex/<session>.
  semaphore_prefixes = ["jobs/reindex"]

  # Session rules match NODE names: holders run on nodes named worker-*.
  session_node_prefixes = ["worker-"]

  # Let holders read the declaration that `consullock run` reads.
  read_keys = ["consul-lock/locks/nightly-report"]

  # `consul lock` asks its agent for the node name.
  agent_read = true
}

# Workers of a run_once lock: they hold the lock, read its declaration and
# profile, and record their runs in its run ledger
# (key write on consul-lock/runs/nightly-ingest, and no other ledger).
# The lock's waiters queue (waiters = "queue"): key_prefix write on
# jobs/nightly-ingest/.queue/ for their queue entries, nothing else under
# the prefix.
resource "consullock_acl_policy" "nightly_ingest" {
  name                  = "nightly-ingest-workers"
  lock_keys             = ["jobs/nightly-ingest/.lock"]
  queue_prefixes        = ["jobs/nightly-ingest"]
  read_keys             = ["consul-lock/locks/nightly-ingest", "consul-lock/session-defaults/fast"]
  run_ledgers           = ["nightly-ingest"]
  session_node_prefixes = ["worker-"]
}

# Workers of a lock with holder_service: the holder registers
# scheduler.service.consul on its agent, which needs service "scheduler"
# write and nothing more about services. holder_services also renders
# node_prefix "worker-" read (an agentless runner lists the instances on
# its -node to remove former holders'); no node write.
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

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

output "granted_rules" {
  value = consullock_acl_policy.nightly_report.rules
}

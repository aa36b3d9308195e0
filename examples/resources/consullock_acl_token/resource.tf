resource "consullock_acl_policy" "nightly_report" {
  name                  = "nightly-report-holders"
  lock_keys             = ["jobs/nightly-report/.lock"]
  session_node_prefixes = ["worker-"]
  agent_read            = true
}

# The token the job's nodes use with `consul lock` or `consullock run`.
resource "consullock_acl_token" "nightly_report" {
  description = "nightly report lock holders"
  policies    = [consullock_acl_policy.nightly_report.name]
}

# A short-lived token, e.g. for a one-off maintenance run. Changing
# expiration_ttl creates a new token.
resource "consullock_acl_token" "maintenance" {
  description    = "one-off maintenance window"
  policies       = [consullock_acl_policy.nightly_report.name]
  expiration_ttl = "8h"
}

# A worker node's agent token: its node identity, plus the lock holders'
# policy so the same token can run the job. Anything added to it outside
# OpenTofu shows in the next plan and is removed by apply.
resource "consullock_acl_token" "worker_1" {
  description = "agent and lock holder on worker-1"
  policies    = [consullock_acl_policy.nightly_report.name]
  node_identities = [{
    node_name  = "worker-1"
    datacenter = "dc1"
  }]
}

output "nightly_report_accessor_id" {
  value = consullock_acl_token.nightly_report.accessor_id
}

output "nightly_report_token" {
  value     = consullock_acl_token.nightly_report.secret_id
  sensitive = true
}

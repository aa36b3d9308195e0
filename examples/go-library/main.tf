# The lock the Go service in main.go runs its job under: once per
# 5-minute slot, on one of its replicas.
#
#   tofu apply
#   # on each of three replicas:
#   CONSUL_HTTP_TOKEN=<worker_token> go run . -lock nightly-report -schedule '*/5 * * * *'

terraform {
  required_providers {
    consullock = {
      source = "consullock/consullock"
    }
  }
}

provider "consullock" {}

resource "consullock_session_defaults" "report" {
  name       = "nightly-report"
  ttl        = "10s"
  lock_delay = "15s"
}

resource "consullock_lock" "report" {
  name             = "nightly-report"
  prefix           = "jobs/nightly-report"
  session_defaults = consullock_session_defaults.report.name
  run_once = {
    schedule          = "*/5 * * * *" # the run ID is the slot, e.g. 2026-12-01T02:05:00Z
    starting_deadline = "4m"
    max_attempts      = 3
  }
}

# The replicas may hold the lock, write its run ledger and the job's fenced
# result, and read the declarations.
resource "consullock_acl_policy" "replicas" {
  name        = "nightly-report-replicas"
  lock_keys   = [consullock_lock.report.key, "jobs/nightly-report/last-result"]
  run_ledgers = [consullock_lock.report.name]
  read_keys = [
    consullock_lock.report.registry_key,
    consullock_session_defaults.report.registry_key,
    consullock_lock.report.pause_key,
  ]
  session_node_prefixes = ["app-"]
}

resource "consullock_acl_token" "replicas" {
  description = "nightly-report replicas"
  policies    = [consullock_acl_policy.replicas.name]
}

output "worker_token" {
  value     = consullock_acl_token.replicas.secret_id
  sensitive = true
}

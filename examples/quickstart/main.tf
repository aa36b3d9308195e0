# Quickstart: one nightly job ("nightly-report") deployed on three workers.
# Every worker's timer fires at 02:00 UTC; the job runs once per night, on
# one of them (run_once: the run ID is the UTC day).
#
#   tofu apply
#   CONSUL_HTTP_TOKEN=$(tofu output -raw worker_token) \
#     consullock run -lock nightly-report -- ./nightly-report.sh   # on each worker
#   tofu apply -refresh-only && tofu output holder
terraform {
  required_providers {
    consullock = {
      source = "consullock/consullock"
    }
  }
}

# Address and token come from CONSUL_HTTP_ADDR and CONSUL_HTTP_TOKEN.
provider "consullock" {}

variable "worker_node_prefix" {
  description = "Consul node-name prefix of the workers (session ACL rules match node names)."
  type        = string
  default     = "worker-"
}

# How holders' sessions behave. If a holder crashes, the next one starts
# at most worst_case_gap later (2 x ttl + lock_delay = 35s), shown at plan
# time. lock_delay 15s leaves a holder cut off from Consul time to notice
# and stop its job before anyone else may start (renew 3.3s + 2s, -grace
# 5s, 1s margin).
resource "consullock_session_defaults" "nightly_report" {
  name       = "nightly-report"
  ttl        = "10s"
  lock_delay = "15s"
  behavior   = "release"
}

# The lock: jobs/nightly-report/.lock, usable by `consul lock`,
# api.Lock and `consullock run`. run_once keeps a run ledger beside it:
# the workers triggered for the same night run the job once, and a run
# whose holder died is retried by the next worker (up to max_attempts).
resource "consullock_lock" "nightly_report" {
  name             = "nightly-report"
  prefix           = "jobs/nightly-report"
  session_defaults = consullock_session_defaults.nightly_report.name
  max_hold         = "1h"
  description      = "Nightly billing report"
  run_once = {
    period       = "24h" # run ID: the UTC day, e.g. 2026-12-01T00:00:00Z
    max_attempts = 3
  }
}

# Exactly what the workers need, and nothing more.
resource "consullock_acl_policy" "workers" {
  name                  = "nightly-report-workers"
  description           = "Workers that run the nightly report"
  lock_keys             = [consullock_lock.nightly_report.key]
  run_ledgers           = [consullock_lock.nightly_report.name]
  session_node_prefixes = [var.worker_node_prefix]
  # `consullock run` reads the declaration, its session profile and pause.
  read_keys = [
    consullock_lock.nightly_report.registry_key,
    consullock_session_defaults.nightly_report.registry_key,
    consullock_lock.nightly_report.pause_key,
  ]
}

# The token's secret is kept in state (and in the worker_token output):
# protect the state, or create the secret elsewhere and pass it with the
# write-only secret_id_wo, which is never stored.
resource "consullock_acl_token" "workers" {
  description = "nightly-report workers"
  policies    = [consullock_acl_policy.workers.name]
}

# For consullock status. It reads all of Consul: in production use the
# rules of `consullock status -print-rules`.
resource "consullock_acl_token" "status" {
  description = "consullock status (read-only)"
  policies    = ["builtin/global-read-only"]
}

# Who holds the lock now. Refresh with `tofu apply -refresh-only`.
data "consullock_lock" "nightly_report" {
  key        = consullock_lock.nightly_report.key
  depends_on = [consullock_lock.nightly_report]
}

output "holder" {
  description = "The current holder and its fencing token (the Raft index of its acquisition, which only grows)."
  value = {
    held          = data.consullock_lock.nightly_report.held
    node          = data.consullock_lock.nightly_report.node
    session       = data.consullock_lock.nightly_report.session
    fencing_token = data.consullock_lock.nightly_report.fencing_token
    lock_index    = data.consullock_lock.nightly_report.lock_index
    value         = data.consullock_lock.nightly_report.value
  }
}

output "worst_case_gap" {
  description = "Longest time nobody runs the job after a holder crashes."
  value       = consullock_session_defaults.nightly_report.worst_case_gap
}

output "granted_rules" {
  description = "The ACL rules the workers' token carries."
  value       = consullock_acl_policy.workers.rules
}

output "worker_token" {
  description = "Give this to the workers as CONSUL_HTTP_TOKEN."
  value       = consullock_acl_token.workers.secret_id
  sensitive   = true
}

output "status_token" {
  value     = consullock_acl_token.status.secret_id
  sensitive = true
}

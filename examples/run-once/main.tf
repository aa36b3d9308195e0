# Run once: the nightly report runs exactly once per day at 02:00 UTC on one
# of the workers, and records its own completion under the fencing token so
# that not even the one window the run ledger leaves open (README.md)
# repeats it.
#
#   tofu apply
#   # on every worker, at each slot (consullock timer -lock nightly-report
#   # prints the systemd timer that does it):
#   consullock run -lock nightly-report -- ./nightly-report.sh

terraform {
  required_providers {
    consullock = {
      source = "consullock/consullock"
    }
  }
}

provider "consullock" {}

resource "consullock_session_defaults" "nightly_report" {
  name       = "nightly-report"
  ttl        = "10s"
  lock_delay = "15s"
}

resource "consullock_lock" "nightly_report" {
  name             = "nightly-report"
  prefix           = "jobs/nightly-report"
  session_defaults = consullock_session_defaults.nightly_report.name
  description      = "Nightly report: once per day at 02:00 UTC, on one worker."
  run_once = {
    schedule          = "0 2 * * *" # the run ID is the slot, e.g. 2026-12-01T02:00:00Z
    starting_deadline = "1h"        # a trigger later than 03:00 does not start it
    max_attempts      = 3
    keep              = 30 # a month of history in `consullock status -lock nightly-report`
  }
}

# The workers may hold the lock, write its run ledger and nothing else.
resource "consullock_acl_policy" "workers" {
  name        = "nightly-report-workers"
  lock_keys   = [consullock_lock.nightly_report.key]
  run_ledgers = [consullock_lock.nightly_report.name]
  read_keys = [
    consullock_lock.nightly_report.registry_key,
    consullock_session_defaults.nightly_report.registry_key,
    consullock_lock.nightly_report.pause_key,
  ]
  session_node_prefixes = ["worker-"]
}

resource "consullock_acl_token" "workers" {
  description = "nightly-report workers"
  policies    = [consullock_acl_policy.workers.name]
}

output "worker_token" {
  value     = consullock_acl_token.workers.secret_id
  sensitive = true
}

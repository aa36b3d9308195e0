terraform {
  required_providers {
    consullock = {
      source = "consullock/consullock"
    }
  }
}

# A module that declares one nightly job: its lock, session profile and
# the workers' policy. tests/ holds its `tofu test` files.
variable "job" {
  description = "The job's name: the lock's name and its key prefix jobs/<job>."
  type        = string
  default     = "nightly-report"
}

resource "consullock_session_defaults" "job" {
  name       = var.job
  ttl        = "10s"
  lock_delay = "15s"
}

resource "consullock_lock" "job" {
  name             = var.job
  prefix           = "jobs/${var.job}"
  session_defaults = consullock_session_defaults.job.name
  run_once = {
    period = "24h"
  }
}

resource "consullock_acl_policy" "workers" {
  name                  = "${var.job}-workers"
  lock_keys             = [consullock_lock.job.key]
  run_ledgers           = [consullock_lock.job.name]
  read_keys             = [consullock_lock.job.registry_key, consullock_session_defaults.job.registry_key]
  session_node_prefixes = ["worker-"]
}

# The key and the gap come from the provider's functions, which compute at
# plan what the resources compute: they run for real under a mock_provider
# too, where a resource's computed values would be random strings.
output "key" {
  value = provider::consullock::lock_key(consullock_lock.job.prefix)
}

output "worst_case_gap" {
  value = provider::consullock::worst_case_gap(consullock_session_defaults.job.ttl, consullock_session_defaults.job.lock_delay)
}

output "rules" {
  value = consullock_acl_policy.workers.rules
}

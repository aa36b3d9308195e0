# A module that declares a nightly job's lock for its workers, and the tests
# `tofu test` runs on it: tests/integration.tftest.hcl against a real Consul
# agent, tests/unit.tftest.hcl with a mocked provider and no Consul at all.
#
#   CONSUL_HTTP_ADDR=... CONSUL_HTTP_TOKEN=... tofu test
terraform {
  required_providers {
    consullock = {
      source = "consullock/consullock"
    }
  }
}

variable "name" {
  description = "The job's name: its lock, profile and policy are named after it."
  type        = string
  default     = "nightly-report"
}

variable "worker_node_prefix" {
  description = "Consul node-name prefix of the workers."
  type        = string
  default     = "worker-"

  validation {
    condition     = length(var.worker_node_prefix) > 0
    error_message = "worker_node_prefix must not be empty: an empty prefix grants sessions on every node."
  }
}

resource "consullock_session_defaults" "job" {
  name       = var.name
  ttl        = "10s"
  lock_delay = "15s"
}

resource "consullock_lock" "job" {
  name             = var.name
  prefix           = "jobs/${var.name}"
  session_defaults = consullock_session_defaults.job.name
  run_once = {
    period = "24h"
  }
}

resource "consullock_acl_policy" "workers" {
  name                  = "${var.name}-workers"
  lock_keys             = [consullock_lock.job.key]
  run_ledgers           = [consullock_lock.job.name]
  session_node_prefixes = [var.worker_node_prefix]
  read_keys = [
    consullock_lock.job.registry_key,
    consullock_session_defaults.job.registry_key,
    consullock_lock.job.pause_key,
  ]
}

output "key" {
  value = consullock_lock.job.key
}

output "worst_case_gap" {
  value = consullock_session_defaults.job.worst_case_gap
}

output "rules" {
  value = consullock_acl_policy.workers.rules
}

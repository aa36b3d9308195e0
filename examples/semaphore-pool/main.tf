# A pool of workers: at most `workers` of them process the thumbnail queue
# at the same time, on any of the nodes the job is deployed to. A semaphore
# (limit > 1) instead of a mutex; usable by `consul lock -n N`,
# api.Semaphore and `consullock run`.
#
#   tofu apply
#   CONSUL_HTTP_TOKEN=$(tofu output -raw worker_token) \
#     consullock run -lock thumbnailers -- ./thumbnail-worker   # on each node
#   tofu apply -refresh-only && tofu output slots
terraform {
  required_providers {
    consullock = {
      source = "consullock/consullock"
    }
  }
}

# Address and token come from CONSUL_HTTP_ADDR and CONSUL_HTTP_TOKEN.
provider "consullock" {}

variable "workers" {
  description = "How many workers may hold a slot at once (the semaphore's limit, 2 to 1024)."
  type        = number
  default     = 4

  validation {
    condition     = var.workers >= 2 && var.workers <= 1024
    error_message = "A pool needs 2 to 1024 slots; for exactly one holder, use a mutex (limit = 1)."
  }
}

variable "worker_node_prefix" {
  description = "Consul node-name prefix of the worker nodes (session ACL rules match node names)."
  type        = string
  default     = "thumb-"
}

variable "allow_consul_lock" {
  description = "Also let workers use `consul lock -n`, which reads its agent's node name (agent_prefix \"\" read). `consullock run` does not need it."
  type        = bool
  default     = false
}

# Semaphore holders use sessions with behavior "delete", as api.Semaphore
# and `consul lock -n` do: a dead holder's contender key disappears with its
# session, which frees the slot. A slot of a crashed worker is free again at
# most worst_case_gap later.
resource "consullock_session_defaults" "thumbnailers" {
  name       = "thumbnailers"
  ttl        = "15s"
  lock_delay = "15s"
  behavior   = "delete"
}

# The semaphore: jobs/thumbnailers/.lock holds {"Limit": N, "Holders": ...}
# with api.Semaphore's flags; each holder owns jobs/thumbnailers/<session>.
# Changing `workers` rewrites the limit in place and keeps the holders.
resource "consullock_lock" "thumbnailers" {
  name             = "thumbnailers"
  prefix           = "jobs/thumbnailers"
  limit            = var.workers
  session_defaults = consullock_session_defaults.thumbnailers.name
  max_hold         = "30m"
  description      = "Thumbnail workers: at most ${var.workers} at once"
}

# What a pool worker needs: write under the semaphore's prefix (the holder
# table and its own contender key), sessions on the worker nodes, and read
# on the two declarations `consullock run` loads.
resource "consullock_acl_policy" "thumbnailers" {
  name                  = "thumbnailers"
  description           = "Thumbnail pool workers"
  semaphore_prefixes    = [consullock_lock.thumbnailers.prefix]
  session_node_prefixes = [var.worker_node_prefix]
  read_keys = [
    consullock_lock.thumbnailers.registry_key,
    consullock_session_defaults.thumbnailers.registry_key,
    consullock_lock.thumbnailers.pause_key,
  ]
  agent_read = var.allow_consul_lock
}

resource "consullock_acl_token" "thumbnailers" {
  description = "thumbnail pool workers"
  policies    = [consullock_acl_policy.thumbnailers.name]
}

# Who holds a slot now. Refresh with `tofu apply -refresh-only`.
data "consullock_lock" "thumbnailers" {
  key        = consullock_lock.thumbnailers.key
  depends_on = [consullock_lock.thumbnailers]
}

locals {
  pool = data.consullock_lock.thumbnailers
}

output "slots" {
  description = "Slots in use out of the limit written in the holder table (0 until a holder has written it)."
  value       = "${length(coalesce(local.pool.holders, []))} of ${coalesce(local.pool.limit, var.workers)} slots held"
}

output "holders" {
  description = "The current holders: node, session, and the value each runner wrote (node, pid, start time)."
  value = [for h in coalesce(local.pool.holders, []) : {
    node    = h.node
    session = h.session
    value   = h.value
  }]
}

output "worst_case_gap" {
  description = "Longest time a crashed worker's slot stays taken."
  value       = consullock_session_defaults.thumbnailers.worst_case_gap
}

output "granted_rules" {
  description = "The ACL rules the workers' token carries."
  value       = consullock_acl_policy.thumbnailers.rules
}

output "worker_token" {
  description = "Give this to the workers as CONSUL_HTTP_TOKEN."
  value       = consullock_acl_token.thumbnailers.secret_id
  sensitive   = true
}

# Fencing with LockIndex: the job's configuration is written only by the
# current lock holder, stamped with its fencing token, and refused when that
# token is lower than the lock's current LockIndex (a former holder that
# lost the lock without noticing). Run it under the lock, for example:
#
#   consullock run -lock nightly-report -- sh -c '
#     TF_VAR_holder_session=$CONSUL_LOCK_SESSION \
#     TF_VAR_holder_lock_index=$CONSUL_LOCK_INDEX \
#     tofu apply -auto-approve'
#
# README.md explains each check and the one the job's own store must make.

terraform {
  required_providers {
    consullock = {
      source = "consullock/consullock"
    }
  }
}

provider "consullock" {}

variable "lock_key" {
  description = "The lock key the job's holders acquire."
  type        = string
  default     = "jobs/nightly-report/.lock"
}

variable "holder_session" {
  description = "Session of the process that runs this apply (CONSUL_LOCK_SESSION)."
  type        = string
}

variable "holder_lock_index" {
  description = "LockIndex the holder saw when it acquired the lock (CONSUL_LOCK_INDEX): its fencing token."
  type        = number
}

variable "schedule" {
  description = "The job setting this configuration manages."
  type        = string
  default     = "0 2 * * *"
}

# Who holds the lock now, read consistently: a cluster without a leader is an
# error here, never a stale answer that would let a former holder through.
data "consullock_lock" "job" {
  key = var.lock_key
}

locals {
  lock = data.consullock_lock.job

  # LockIndex starts again at 1 when the key is deleted and re-created (for
  # example by a session with behavior "delete"), and the key's create_index
  # grows. Compared as (create_index, lock_index), the token never goes back.
  fencing_token = {
    create_index = local.lock.create_index
    lock_index   = var.holder_lock_index
  }
}

# The guarded resource: the job's configuration, stamped with the token of
# the holder that wrote it.
resource "terraform_data" "job_config" {
  input = {
    schedule      = var.schedule
    written_by    = var.holder_session
    fencing_token = local.fencing_token
  }

  lifecycle {
    precondition {
      condition     = local.lock.held && local.lock.session == var.holder_session
      error_message = "This apply runs for session ${var.holder_session}, which does not hold ${var.lock_key} (holder: ${coalesce(local.lock.session, "none")}). Only the holder may write the job's configuration."
    }
    precondition {
      condition     = local.lock.lock_index != null && var.holder_lock_index >= local.lock.lock_index
      error_message = "Fencing token ${var.holder_lock_index} is lower than the lock's current LockIndex ${coalesce(local.lock.lock_index, 0)}: the lock has changed hands since this holder acquired it. Refusing the write."
    }
    precondition {
      condition     = local.lock.lock_index == null || var.holder_lock_index <= local.lock.lock_index
      error_message = "Fencing token ${var.holder_lock_index} is higher than any LockIndex Consul has issued for ${var.lock_key} (${coalesce(local.lock.lock_index, 0)}): it was not obtained from this lock."
    }
  }
}

output "job_config" {
  description = "What the job reads: its schedule and the fencing token it must present to the store it writes to."
  value       = jsonencode(terraform_data.job_config.output)
}

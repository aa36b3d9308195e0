# Fencing with the fencing token: the job's configuration is written only by
# the current lock holder, stamped with its fencing token (the Raft index at
# which its session acquired the lock), and refused for a former holder that
# lost the lock without noticing. Run it under the lock, for example:
#
#   consullock run -lock nightly-report -- sh -c '
#     TF_VAR_holder_session=$CONSUL_LOCK_SESSION \
#     TF_VAR_holder_fencing_token=$CONSUL_LOCK_FENCING_TOKEN \
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

variable "holder_fencing_token" {
  description = "The holder's fencing token (CONSUL_LOCK_FENCING_TOKEN): the Raft index at which its session acquired the lock."
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
}

# The guarded resource: the job's configuration, stamped with the token of
# the holder that wrote it.
resource "terraform_data" "job_config" {
  input = {
    schedule      = var.schedule
    written_by    = var.holder_session
    fencing_token = var.holder_fencing_token
  }

  lifecycle {
    precondition {
      condition     = local.lock.held && local.lock.session == var.holder_session
      error_message = "This apply runs for session ${var.holder_session}, which does not hold ${var.lock_key} (holder: ${coalesce(local.lock.session, "none")}). Only the holder may write the job's configuration."
    }
    precondition {
      condition     = local.lock.fencing_token != null && var.holder_fencing_token <= local.lock.fencing_token
      error_message = "Fencing token ${var.holder_fencing_token} is higher than the index at which the current holder acquired ${var.lock_key} (${coalesce(local.lock.fencing_token, 0)}): it was not obtained from this lock."
    }
  }
}

output "job_config" {
  description = "What the job reads: its schedule and the fencing token it must present to the store it writes to."
  value       = jsonencode(terraform_data.job_config.output)
}

terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}

provider "consullock" {}

# Declared once, e.g. in the configuration that manages Consul itself:
#
#   resource "consullock_session_defaults" "pipelines" {
#     name       = "pipelines"
#     ttl        = "30s"
#     lock_delay = "15s"
#   }
#   resource "consullock_lock" "env_prod" {
#     name             = "env-prod"
#     prefix           = "locks/env/prod"
#     session_defaults = consullock_session_defaults.pipelines.name
#   }

# Every pipeline that changes the prod environment holds the same lock.
# Open waits up to `wait` for another pipeline's run to finish.
ephemeral "consullock_lock" "env" {
  lock = "env-prod"
  wait = "20m"
}

variable "release" {
  type = string
}

# The changes that must not interleave with another pipeline's depend on
# the lock, so they only start once it is held.
resource "terraform_data" "deploy" {
  input      = var.release
  depends_on = [ephemeral.consullock_lock.env]
}

# A migration run by a provisioner gets the fencing token: the tool records
# the highest token it has seen and refuses a lower one, so a pipeline that
# lost the lock (a paused CI runner whose session expired) cannot apply a
# stale migration after a newer one.
resource "terraform_data" "migrate" {
  triggers_replace = [var.release]

  provisioner "local-exec" {
    command = "./migrate --release \"$RELEASE\" --fencing-token \"$FENCING_TOKEN\""
    environment = {
      RELEASE       = var.release
      FENCING_TOKEN = ephemeral.consullock_lock.env.fencing_token
      LOCK_SESSION  = ephemeral.consullock_lock.env.session
    }
  }

  depends_on = [terraform_data.deploy]
}

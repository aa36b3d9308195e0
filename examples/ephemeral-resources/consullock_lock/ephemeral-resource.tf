# Hold the declared lock "prod-maintenance" while this configuration is
# planned and applied. A second pipeline with the same block waits (up to
# `wait`) until the first one's run has closed the lock.
ephemeral "consullock_lock" "prod" {
  lock = "prod-maintenance"
  wait = "15m"
}

# Or hold an undeclared key, with the session settings inline.
ephemeral "consullock_lock" "migrations" {
  key        = "locks/prod/migrations/.lock"
  ttl        = "30s"
  lock_delay = "15s"
  wait       = "10m"
}

# Work that must not overlap gets the fencing token, which only grows from
# holder to holder: the migration tool refuses a token lower than the
# highest it has seen.
resource "terraform_data" "migrate" {
  triggers_replace = [var.schema_version]

  provisioner "local-exec" {
    command = "./migrate --to \"$SCHEMA_VERSION\" --fencing-token \"$FENCING_TOKEN\""
    environment = {
      SCHEMA_VERSION = var.schema_version
      FENCING_TOKEN  = ephemeral.consullock_lock.migrations.fencing_token
    }
  }
}

variable "schema_version" {
  type = string
}

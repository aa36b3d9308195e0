resource "consullock_acl_policy" "migrations" {
  name                  = "migration-lock-holders"
  lock_keys             = ["locks/prod/migrations/.lock"]
  session_node_prefixes = ["ci-"]
}

# A token for this run only: created when the run needs it, deleted when the
# run ends, expired by Consul after `ttl` if the run never got to delete it.
# Its secret is never written to plan or state.
ephemeral "consullock_acl_token" "job" {
  policies    = [consullock_acl_policy.migrations.name]
  ttl         = "30m"
  description = "migration run"
}

# Hand it to a command run by a provisioner ...
resource "terraform_data" "migrate" {
  provisioner "local-exec" {
    command = "consullock run -lock migrations -- ./migrate"
    environment = {
      CONSUL_HTTP_TOKEN = ephemeral.consullock_acl_token.job.secret_id
    }
  }
}

terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}

# The least-privilege rules of lock holders, for the official Consul
# provider's policy resource (or a Vault Consul secrets engine role, or
# Nomad): exactly the text consullock_acl_policy renders for these inputs.
locals {
  holder_rules = provider::consullock::lock_rules({
    lock_keys             = ["jobs/nightly-report/.lock"]
    queue_prefixes        = ["jobs/nightly-report"] # its consullock_lock has waiters = "queue"
    semaphore_prefixes    = ["jobs/workers"]
    read_keys             = ["consul-lock/locks/nightly-report"]
    session_node_prefixes = ["worker-"]
    agent_read            = true
  })
}

output "holder_rules" {
  value = local.holder_rules
}

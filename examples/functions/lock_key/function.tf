terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}

# The key `consul lock service/billing/leader` uses.
output "billing_leader_key" {
  value = provider::consullock::lock_key("service/billing/leader") # "service/billing/leader/.lock"
}

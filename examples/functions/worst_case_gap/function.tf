terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}

# How long a crashed holder can leave the job unrun: 2 x ttl + lock_delay.
output "gap" {
  value = provider::consullock::worst_case_gap("15s", "15s") # "45s"
}

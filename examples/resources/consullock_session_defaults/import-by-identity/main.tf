# OpenTofu 1.12+ (and Terraform 1.12+): an import block by resource identity,
# the profile's name.
import {
  to = consullock_session_defaults.fast
  identity = {
    name = "fast"
  }
}

resource "consullock_session_defaults" "fast" {
  name       = "fast"
  ttl        = "15s"
  lock_delay = "10s"
}

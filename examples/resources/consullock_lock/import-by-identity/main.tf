# OpenTofu 1.12+ (and Terraform 1.12+): an import block by resource identity,
# the lock's name. The declared inputs are read from the registry record.
import {
  to = consullock_lock.nightly_report
  identity = {
    name = "nightly-report"
  }
}

resource "consullock_lock" "nightly_report" {
  name   = "nightly-report"
  prefix = "jobs/nightly-report"
}

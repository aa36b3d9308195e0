# OpenTofu 1.12+ (and Terraform 1.12+): an import block by resource identity,
# the policy's name.
import {
  to = consullock_acl_policy.nightly_report
  identity = {
    name = "nightly-report-holders"
  }
}

resource "consullock_acl_policy" "nightly_report" {
  name                  = "nightly-report-holders"
  lock_keys             = ["jobs/nightly-report/.lock"]
  session_node_prefixes = ["worker-"]
}

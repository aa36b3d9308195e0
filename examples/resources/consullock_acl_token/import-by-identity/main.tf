# OpenTofu 1.12+ (and Terraform 1.12+): an import block by resource identity,
# the token's accessor ID (never its secret).
import {
  to = consullock_acl_token.nightly_report
  identity = {
    accessor_id = "6a1f4d2e-0b7c-4e3a-8f9d-1c2b3a4d5e6f"
  }
}

resource "consullock_acl_token" "nightly_report" {
  description = "nightly-report holders"
  policies    = ["nightly-report-holders"]
}

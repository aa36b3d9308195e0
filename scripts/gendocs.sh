#!/usr/bin/env bash
# Renders docs/ from templates/ and examples/ with tfplugindocs. The schema
# comes from the built provider through OpenTofu (dev_overrides, no init).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/bin"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cat >"$work/tofu.rc" <<RC
provider_installation {
  dev_overrides {
    "registry.opentofu.org/consullock/consullock" = "$bin"
  }
  direct {}
}
RC
mkdir -p "$work/cfg"
cat >"$work/cfg/main.tf" <<'TF'
terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}
TF
# TOFU: a CLI that knows ephemeral resources (OpenTofu 1.11+); older ones
# leave them out of the schema and their pages would not be rendered.
tofu="${TOFU:-$bin/tofu}"
(cd "$work/cfg" && TF_CLI_CONFIG_FILE="$work/tofu.rc" "$tofu" providers schema -json) >"$work/raw.json"
# tfplugindocs looks the provider up under its Terraform registry name.
sed 's#"registry.opentofu.org/consullock/consullock"#"registry.terraform.io/hashicorp/consullock"#' "$work/raw.json" >"$work/schema.json"

cd "$root"
"$bin/tfplugindocs" generate --provider-name consullock --providers-schema "$work/schema.json" \
  --rendered-provider-name consullock --examples-dir examples --website-source-dir templates
"$bin/tfplugindocs" validate --provider-name consullock

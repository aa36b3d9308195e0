#!/usr/bin/env bash
# Builds the pinned test and docs tools into bin/, each only when its pin
# changed since the last build (a stamp holds the hash of its recipe).
#   tools/build.sh [consul] [tofu] [golangci-lint] [goreleaser] [tfplugindocs]
#                  [promtool] [prometheus] [consul-1.16.3] [tofu-1.10.6] [terraform-1.5.7] [compat]
# consul (1.14.11) and tofu (1.12.6) are the primary pair `make test` uses;
# promtool and prometheus (v0.316.0) run the rules and alert tests;
# consul-1.16.3, the newest supported Consul, runs the controller's
# CLI-driven tests again in `make test`; the others (`compat` builds them
# all) are only for `make test-compat`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/bin"
mkdir -p "$bin"
export CGO_ENABLED=0
export CHECKPOINT_DISABLE=1 # terraform version would ask HashiCorp for news

GOLANGCI_LINT_VERSION=v2.15.0
GORELEASER_VERSION=v2.15.1
TFPLUGINDOCS_VERSION=v0.25.0

# version_line BIN: the "<Product> vX.Y.Z" line of `BIN version` (OpenTofu
# 1.12 prints CLI configuration warnings on stdout before it).
version_line() { # "Consul v1.14.11", "OpenTofu v1.12.6", "promtool, version 0.316.0"
  { "$1" version 2>/dev/null || "$1" --version 2>&1; } | grep -m1 -E '^[A-Za-z]+,? v(ersion )?[0-9]' | sed 's/ (branch.*//' || true
}

stamp_ok() { # name recipe-hash
  [[ -x "$bin/$1" && -f "$bin/.$1.stamp" && "$(cat "$bin/.$1.stamp")" == "$2" ]]
}

build_module_tool() { # name module-dir package [ldflags]
  local name=$1 dir=$2 pkg=$3 ldflags=${4:-}
  local hash
  hash="$(cat "$root/tools/$dir/go.mod" "$root/tools/$dir/go.sum" | sha256sum | cut -d' ' -f1)"
  if stamp_ok "$name" "$hash"; then
    echo "tools: $name is up to date ($(version_line "$bin/$name"))"
    return
  fi
  echo "tools: building $name from tools/$dir (first build takes a few minutes) ..."
  local start=$SECONDS
  (cd "$root/tools/$dir" && go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$hash" >"$bin/.$name.stamp"
  echo "tools: built $name in $((SECONDS - start))s: $(version_line "$bin/$name")"
}

install_tool() { # name module@version
  local name=$1 spec=$2
  if stamp_ok "$name" "$spec"; then
    echo "tools: $name is up to date ($spec)"
    return
  fi
  echo "tools: installing $spec ..."
  local start=$SECONDS
  GOBIN="$bin" go install "$spec"
  echo "$spec" >"$bin/.$name.stamp"
  echo "tools: installed $name in $((SECONDS - start))s"
}

want=()
for t in "$@"; do
  if [[ $t == compat ]]; then want+=(consul consul-1.16.3 tofu tofu-1.10.6 terraform-1.5.7); else want+=("$t"); fi
done
[[ ${#want[@]} -eq 0 ]] && want=(consul tofu)
for t in "${want[@]}"; do
  case "$t" in
  consul) build_module_tool consul consul github.com/hashicorp/consul ;;
  consul-1.16.3) build_module_tool consul-1.16.3 consul-1.16.3 github.com/hashicorp/consul ;;
  # OpenTofu reports "-dev" unless told it is a release build.
  tofu) build_module_tool tofu tofu github.com/opentofu/opentofu/cmd/tofu "-X github.com/opentofu/opentofu/version.dev=no" ;;
  tofu-1.10.6) build_module_tool tofu-1.10.6 tofu-1.10.6 github.com/opentofu/opentofu/cmd/tofu "-X github.com/opentofu/opentofu/version.dev=no" ;;
  terraform-1.5.7) build_module_tool terraform-1.5.7 terraform-1.5.7 github.com/hashicorp/terraform ;;
  promtool) build_module_tool promtool prometheus github.com/prometheus/prometheus/cmd/promtool "-X github.com/prometheus/common/version.Version=0.316.0" ;;
  prometheus) build_module_tool prometheus prometheus github.com/prometheus/prometheus/cmd/prometheus "-X github.com/prometheus/common/version.Version=0.316.0" ;;
  golangci-lint) install_tool golangci-lint "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION" ;;
  goreleaser) install_tool goreleaser "github.com/goreleaser/goreleaser/v2@$GORELEASER_VERSION" ;;
  tfplugindocs) install_tool tfplugindocs "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs@$TFPLUGINDOCS_VERSION" ;;
  *) echo "tools: unknown tool $t" >&2; exit 2 ;;
  esac
done

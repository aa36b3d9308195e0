#!/usr/bin/env bash
# make image-check: builds the release's OCI image of consullock from the
# `kos:` section of .goreleaser.yml with ko (in-process, no Docker daemon)
# into an OCI image layout (dist/image), and inspects it with Go code
# (tests/deploycheck/imagecheck, in the tests module): linux/amd64 and linux/arm64, user
# 65532, entrypoint /ko-app/consullock, the OCI labels,
# an ELF binary per platform, and this machine's one run from the image's
# filesystem (-version, then `status` against a real Consul agent when
# bin/consul or CONSUL_BIN exists).
#
# The base image: the release's (cgr.dev/chainguard/static) is pulled from
# its registry at release time; with no network here the check builds on an
# empty multi-platform base served by an in-process registry on loopback.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
KO_VERSION=v0.18.1 # the ko goreleaser v2.15.1 builds with
if [[ ! -x bin/ko || "$(cat bin/.ko.stamp 2>/dev/null)" != "$KO_VERSION" ]]; then
  echo "image-check: installing ko $KO_VERSION into bin/ ..."
  GOBIN="$root/bin" CGO_ENABLED=0 go install "github.com/google/ko@$KO_VERSION"
  echo "$KO_VERSION" >bin/.ko.stamp
fi
if [[ -z "${CONSUL_BIN:-}" && -x bin/consul ]]; then
  export CONSUL_BIN="$root/bin/consul"
fi
# Built from the tests module, run from the root: ko builds ./cmd/consullock here.
go -C tests build -o "$root/bin/imagecheck" ./deploycheck/imagecheck
bin/imagecheck -config .goreleaser.yml -ko bin/ko -out "${IMAGE_LAYOUT:-dist/image}"

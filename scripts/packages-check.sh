#!/usr/bin/env bash
# make packages: builds the .deb and .rpm of consullock for linux/amd64 and
# linux/arm64 from the nfpms: section of .goreleaser.yml (a snapshot from a
# Linux-only copy of the config: the packages are the release's own, the
# darwin and windows archives are not built), then checks them:
#   - tests/deploycheck/packagecheck reads each package's file list, modes,
#     config-file marks, unit files and install script from the archives;
#   - lintian lints the .deb files, installed from Debian's packages when it
#     is missing and this runs as root with apt-get; otherwise the lint step
#     is skipped and says so (the layout is still checked).
# Output: PACKAGES_DIST (default dist/).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="${PACKAGES_DIST:-dist}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

tools/build.sh goreleaser
sed -e 's/goos: \[linux, darwin, windows\]/goos: [linux]/' .goreleaser.yml >"$work/goreleaser.yml"
echo "dist: $out" >>"$work/goreleaser.yml"
echo "packages: goreleaser snapshot (linux/amd64, linux/arm64) into $out/ ..."
bin/goreleaser release --snapshot --clean --skip=sign,ko --config "$work/goreleaser.yml" >"$work/goreleaser.log" 2>&1 ||
  { cat "$work/goreleaser.log"; exit 1; }
echo "packages: built in $((SECONDS - start))s"
shopt -s nullglob
packages=("$out"/*.deb "$out"/*.rpm)
(cd "$out" && grep -E '\.(deb|rpm)$' ./*_SHA256SUMS | sha256sum -c --quiet -) ||
  { echo "packages: the checksums file does not list the packages with their hashes" >&2; exit 1; }

go -C tests build -o "$root/bin/packagecheck" ./deploycheck/packagecheck
bin/packagecheck -root . "${packages[@]}"

lint="skipped"
if ! command -v lintian >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "packages: installing lintian from Debian's packages ..."
  { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian; } >"$work/apt.log" 2>&1 ||
    { tail -n 20 "$work/apt.log"; echo "packages: lintian could not be installed" >&2; }
fi
if command -v lintian >/dev/null 2>&1; then
  # Errors fail the check; warnings are printed. What stands is overridden,
  # with the reasons, in the package itself (scripts/packaging/lintian-overrides).
  for deb in "$out"/*.deb; do
    echo "packages: lintian $(basename "$deb")"
    lintian --fail-on error,warning --tag-display-limit 0 "$deb"
  done
  lint="passed ($(lintian --version))"
else
  echo "packages: LINT SKIPPED: lintian is not installed and cannot be here (needs root and apt-get); the .deb files were not linted" >&2
fi
echo "packages: ${#packages[@]} packages in $out/ have the promised layout; lintian: $lint; $((SECONDS - start))s in all"

#!/usr/bin/env bash
# make packages: builds the .deb and .rpm of consullock for linux/amd64 and
# linux/arm64 from the nfpms: section of .goreleaser.yml (a snapshot from a
# Linux-only copy of the config: the packages are the release's own, the
# darwin and windows archives are not built), then checks them:
#   - tests/deploycheck/packagecheck reads each package's file list, modes,
#     config-file marks, unit files and install script from the archives;
#   - lintian lints the .deb files, installed from Debian's packages when it
#     is missing and this runs as root with apt-get; otherwise the lint step
#     is skipped and says so (the layout is still checked);
#   - as root with dpkg, the .deb of this machine's architecture is
#     installed, upgraded over an edited config file and purged.
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
# Installed for real (as root with dpkg, unless PACKAGES_INSTALL=0): the
# install script runs (users), the binary runs, an upgrade keeps an edited
# config file, and a purge removes what the package installed.
install="not tried (needs root and dpkg; PACKAGES_INSTALL=0 turns it off)"
deb="$(ls "$out"/*_"$(dpkg --print-architecture 2>/dev/null || echo none)".deb 2>/dev/null | head -n1 || true)"
if [[ "${PACKAGES_INSTALL:-1}" != 0 && $(id -u) -eq 0 && -n "$deb" ]] && ! dpkg -s consullock >/dev/null 2>&1; then
  echo "packages: dpkg -i $(basename "$deb"), an upgrade over an edited config, then a purge"
  dpkg -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; exit 1; }
  id consullock >/dev/null && id consullock-jobs >/dev/null ||
    { echo "packages: the install script did not create the users consullock and consullock-jobs" >&2; exit 1; }
  /usr/bin/consullock -version >/dev/null
  echo "# kept on upgrade" >>/etc/consullock/controller.env
  dpkg -i "$deb" >>"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; exit 1; }
  grep -q '^# kept on upgrade$' /etc/consullock/controller.env ||
    { echo "packages: an upgrade overwrote the edited /etc/consullock/controller.env" >&2; exit 1; }
  dpkg --purge consullock >>"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; exit 1; }
  if [[ -e /usr/bin/consullock || -e /etc/consullock/controller.env || -e /usr/lib/systemd/system/consullock-controller.service ]]; then
    echo "packages: the purge left files behind" >&2; exit 1
  fi
  install="installed, upgraded keeping the edited config, purged"
fi
echo "packages: ${#packages[@]} packages in $out/ have the promised layout; lintian: $lint; install: $install; $((SECONDS - start))s in all"

#!/usr/bin/env bash
# make release-sign-check: proves the goreleaser `signs:` stanza gives what
# the registry verifies: a detached GPG signature of SHA256SUMS that still
# matches the file goreleaser leaves, and checksums of the archives. Uses a
# throwaway key in a temporary GNUPGHOME and a linux/amd64-only copy of
# .goreleaser.yml (the signing and checksum parts are the release's own;
# the image, which a snapshot loads into a Docker daemon, is make image-check's).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
work="$(mktemp -d)"
trap 'gpgconf --homedir "$work/gnupg" --kill all 2>/dev/null || true; rm -rf "$work"' EXIT
export GNUPGHOME="$work/gnupg"
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key 'consullock release check <release-check@example.invalid>' rsa3072 sign 1d 2>/dev/null
GPG_FINGERPRINT="$(gpg --list-secret-keys --with-colons | awk -F: '/^fpr/ {print $10; exit}')"
export GPG_FINGERPRINT

sed -e 's/goos: \[linux, darwin, windows\]/goos: [linux]/' -e 's/goarch: \[amd64, arm64\]/goarch: [amd64]/' \
  .goreleaser.yml >"$work/goreleaser.yml"
bin/goreleaser release --snapshot --clean --skip=ko --config "$work/goreleaser.yml" >"$work/goreleaser.log" 2>&1 ||
  { cat "$work/goreleaser.log"; exit 1; }

sums=(dist/*_SHA256SUMS)
[[ -f "${sums[0]}" && -f "${sums[0]}.sig" ]] || { ls dist; echo "no SHA256SUMS and .sig in dist/" >&2; exit 1; }
if grep -q '\.sig$' "${sums[0]}"; then
  echo "${sums[0]} lists a signature: it was rewritten after signing" >&2; exit 1
fi
gpg --batch --verify "${sums[0]}.sig" "${sums[0]}" 2>&1 | grep 'Good signature' ||
  { gpg --batch --verify "${sums[0]}.sig" "${sums[0]}"; echo "the signature does not verify" >&2; exit 1; }
# The registry reads the zips' hashes from this file.
(cd dist && grep -E '\.(zip|tar\.gz)$' "${sums[0]##*/}" | sha256sum -c -)
for a in dist/*.zip dist/*.tar.gz; do
  if [[ $a == *.zip ]]; then files="$(unzip -Z1 "$a")"; else files="$(tar tzf "$a")"; fi
  grep -qx LICENSE <<<"$files" || { echo "$a lacks LICENSE" >&2; exit 1; }
done
echo "release signing: ${sums[0]##*/}.sig verifies, checksums match, archives carry LICENSE"

#!/usr/bin/env bash
# CI's reproducibility check: run the release build twice, in two different
# directories (the checkout, and a fresh copy of its tracked files) with two
# different fresh GOPATH/GOCACHE/module caches, and require equal digests.
#
# REPRO_ARTIFACTS picks the artifacts (default: sparkinfer, the measured
# appliance binary; "sparkinfer,sparkctl" adds the client tool, whose
# fresh-cache build compiles cosign's ~250 modules and takes several minutes
# more on a 2-core machine). Modules come from the local module download
# cache through a file:// GOPROXY: go checks each one against go.sum, so the
# result does not depend on that cache.
set -euo pipefail
cd "$(dirname "$0")/.."
artifacts=${REPRO_ARTIFACTS:-sparkinfer}
tmp=$(mktemp -d)
cleanup() { chmod -R u+w "$tmp" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
go build -o "$tmp/sparkctl" ./cmd/sparkctl
proxy="file://$(go env GOMODCACHE)/cache/download"
start=$(date +%s)
"$tmp/sparkctl" release --only "$artifacts" --out "$tmp/a/dist" \
	--gocache "$tmp/a/gocache" --gopath "$tmp/a/gopath" --proxy "$proxy" .
mid=$(date +%s)
# The release binary reports the source hash it was built from and its own digest.
if [[ ",$artifacts," == *,sparkinfer,* ]]; then
	hash=$(sed -n 's/^  "source_hash": "\([0-9a-f]*\)",$/\1/p' "$tmp/a/dist/measurements.json")
	digest=$(sha256sum "$tmp/a/dist/sparkinfer" | cut -d' ' -f1)
	info=$("$tmp/a/dist/sparkinfer" version --json)
	grep -q "\"source_hash\": \"$hash\"" <<<"$info" || { echo "sparkinfer version: source hash is not $hash:"; echo "$info"; exit 1; }
	grep -q "\"binary_sha256\": \"$digest\"" <<<"$info" || { echo "sparkinfer version: binary digest is not $digest:"; echo "$info"; exit 1; }
fi
"$tmp/sparkctl" reproduce --source . --expect "$tmp/a/dist/measurements.json" \
	--workdir "$tmp/b" --proxy "$proxy"
end=$(date +%s)
echo "reproducible-check: $artifacts built twice with fresh caches: $((mid - start))s + $((end - mid))s"

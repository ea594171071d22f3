#!/usr/bin/env bash
# Runs every fuzz target in the module, one after another, for FUZZTIME each
# (default 60s), or only those whose name matches the extended regular
# expression given as the one argument. Prints one line per target and exits 1
# if any target failed; a failing input is left under the package's
# testdata/fuzz/ for `go test -run`.
#
# -fuzzminimizetime is short on purpose: with the default (60s) a target whose
# seeds are large (a real evidence bundle, a RIM, a tokenizer.json) spends the
# whole run minimizing its first new-coverage input and executes a handful of
# inputs. Run `bash scripts/test.sh` once first: some seeds are npm packages.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-60s}
pattern=${1:-.}
if [ $# -gt 1 ]; then
	echo "usage: scripts/fuzz.sh [NAME_REGEX]   (FUZZTIME=60s by default)" >&2
	exit 2
fi

# The toolchain lists each package's fuzz targets, then an "ok  <package>" line.
listing=$(go test -list '^Fuzz' ./...)
targets=$(awk '/^Fuzz/ { names[n++] = $1; next } /^ok / { for (i = 0; i < n; i++) print $2, names[i]; n = 0 }' <<<"$listing")
if [ -z "$targets" ]; then
	echo "scripts/fuzz.sh: no fuzz targets found" >&2
	exit 1
fi

failed=0
ran=0
while read -r pkg name; do
	echo "$name" | grep -Eq -- "$pattern" || continue
	ran=$((ran + 1))
	log=$(mktemp)
	if go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime=2s "$pkg" >"$log" 2>&1; then
		execs=$(grep -Eo 'execs: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
		echo "ok   $pkg $name (${execs:-?} execs)"
	else
		failed=$((failed + 1))
		echo "FAIL $pkg $name"
		sed 's/^/    /' "$log"
	fi
	rm -f "$log"
done <<<"$targets"

if [ "$ran" = 0 ]; then
	echo "scripts/fuzz.sh: no fuzz target matches $pattern" >&2
	exit 2
fi
echo "$ran targets, $failed failed"
[ "$failed" = 0 ]

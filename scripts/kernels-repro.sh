#!/usr/bin/env bash
# Whether the kernels library builds reproducibly with the nvcc at hand: builds
# it twice from the same directory with the same make variables (any given
# here are passed on: ARCHS=90, NVCC=..., NVFLAGS=...), into two build
# directories under $OUT (default /tmp/kernels-repro), and compares them.
# Prints each build's time and whether nvcc ran with address-space
# randomization off, both sha256 digests, then either "reproducible" (exit 0) or the
# sections that differ (scripts/elf-diff.py; exit 1). Needs nvcc, and
# cuobjdump for the device code's sections.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kernels-repro}
rm -rf "$OUT/1" "$OUT/2"
mkdir -p "$OUT"
for i in 1 2; do
	start=$(date +%s)
	make -C kernels BUILD="$OUT/$i" "$@" > "$OUT/build$i.log" 2>&1 || { echo "build $i failed:"; tail -5 "$OUT/build$i.log"; exit 2; }
	# (kernels/Makefile says so in the log when nvcc runs without setarch -R)
	rand="off (setarch -R)"
	grep -q "address-space randomization on" "$OUT/build$i.log" && rand=on
	echo "build $i: $(( $(date +%s) - start )) s, address-space randomization $rand"
done
(cd "$OUT" && sha256sum 1/libsparkinfer_kernels.so 2/libsparkinfer_kernels.so)
if cmp -s "$OUT/1/libsparkinfer_kernels.so" "$OUT/2/libsparkinfer_kernels.so"; then
	echo "reproducible: the two builds are identical"
	exit 0
fi
echo "NOT reproducible; the sections that differ:"
python3 scripts/elf-diff.py "$OUT/1/libsparkinfer_kernels.so" "$OUT/2/libsparkinfer_kernels.so"
exit 1

#!/usr/bin/env bash
# GPU check: builds the CUDA kernels, runs every kernel's parity test against
# its Go reference, checks whole-model parity with the CPU reference
# (stories260K greedy text, synthetic models' top-1 agreement and KL), and
# benchmarks decode/prefill. Runs on a machine with an NVIDIA GPU and nvcc;
# Go is not needed there: build the Go binaries elsewhere with
#   scripts/gpu-check.sh build      (writes .dev/gpu/{sparkinfer,cuda.test})
# then on the GPU machine:
#   scripts/gpu-check.sh run [stages...]   (stages: kernels ops stories parity bench sanitize opbench variants profile ab gpc trace probe chain repro;
#                                          default: kernels ops stories parity bench sanitize)
# Kernel variants: SPARKINFER_KERNEL_VARIANT=1|2 selects one for every stage
# (unset: the library's default, 2); the `variants` stage runs stories,
# parity and bench once per variant, `opbench` the per-op benchmarks.
# Results go to $OUT (default /tmp/gpu-out). GPU_REQUIRE=NAME (e.g. H200)
# stops the run at once, exit 3, unless the GPU's name contains NAME.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.dev/gpu}
OUT=${OUT:-/tmp/gpu-out}
MODELS=${MODELS:-/tmp/sparkinfer-models}
mode=${1:-run}; shift || true

if [ "$mode" = build ]; then
	mkdir -p "$BIN"
	CGO_ENABLED=1 go build -trimpath -o "$BIN/sparkinfer" ./cmd/sparkinfer
	CGO_ENABLED=1 go test -c -o "$BIN/cuda.test" ./engine/cuda
	exit
fi

stages=${*:-kernels ops stories parity bench sanitize}
echo "kernel variant: ${SPARKINFER_KERNEL_VARIANT:-default}"
has() { [[ " $stages " == *" $1 "* ]]; }
mkdir -p "$OUT" "$MODELS"
export SPARKINFER_KERNELS=${SPARKINFER_KERNELS:-$PWD/kernels/build/libsparkinfer_kernels.so}
SI="$BIN/sparkinfer"
K="--kernels $SPARKINFER_KERNELS --kernels-any-digest-unsafe"
log() { echo "== $(date -u +%H:%M:%S) $*"; }
build90() { # OUT.so SOURCE [nvcc flags...]: a kernels library for sm_90 alone (A/B and trace builds)
	local out=$1 src=$2; shift 2
	${NVCC:-nvcc} -O3 -std=c++17 -Ikernels -Xcompiler -fPIC -gencode arch=compute_90,code=sm_90 -shared -cudart static \
		"$@" -o "$out" "$src"
}

log "gpu"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total --format=csv | tee "$OUT/gpu.txt"
# a device call that may land on another card spends no time there
if [ -n "${GPU_REQUIRE:-}" ] && ! cut -d, -f1 "$OUT/gpu.txt" | grep -q -- "$GPU_REQUIRE"; then
	echo "GPU_REQUIRE=$GPU_REQUIRE: not this GPU, stopping"; exit 3
fi
nvidia-smi -q 2>/dev/null | grep -iA4 "confidential\|conf compute" | head -20 | tee -a "$OUT/gpu.txt"
nvcc --version | tail -1

if has kernels; then
	log "build kernels"
	make -C kernels -j4 ARCHS="${ARCHS:-90 100 120}" 2>&1 | tail -3 || exit 1
	sha256sum kernels/build/libsparkinfer_kernels.so | tee "$OUT/kernels.sha256"
fi

if has ops; then
	log "per-op parity"
	"$BIN/cuda.test" -test.v -test.count=1 > "$OUT/ops.log" 2>&1
	echo "ops exit $?"; grep -cE "^    --- PASS" "$OUT/ops.log"; grep -E "^(--- |FAIL|ok|PASS)|FAIL:" "$OUT/ops.log" | head -40
fi

if has stories; then
	log "stories260K greedy on cuda"
	"$SI" generate --device cuda $K --temperature 0 --max-tokens 256 > "$OUT/stories.cuda.txt"
	if cmp -s "$OUT/stories.cuda.txt" engine/testdata/stories260K.greedy.txt; then echo "stories260K: IDENTICAL"; else echo "stories260K: DIFFERS"; diff <(fold -w 80 "$OUT/stories.cuda.txt") <(fold -w 80 engine/testdata/stories260K.greedy.txt) | head; fi
	"$SI" parity $K --tokens 256
fi

synth() { # name arch shape type
	[ -f "$MODELS/$1.gguf" ] || "$SI" synth --arch "$2" --shape "$3" --type "$4" --out "$MODELS/$1.gguf" 2>&1 | tail -1
}
model() { # name: synthesise the named benchmark model if missing
	case $1 in
	tinyllama-q8_0) synth $1 llama tinyllama-1.1b Q8_0 ;;
	tinyllama-q4_k_m) synth $1 llama tinyllama-1.1b Q4_K_M ;;
	llama2-7b-q4_k_m) synth $1 llama llama2-7b Q4_K_M ;;
	llama2-7b-q8_0) synth $1 llama llama2-7b Q8_0 ;;
	esac
}

if has parity; then
	log "synthetic models + parity"
	for m in ${PARITY_MODELS:-tinyllama-q8_0 tinyllama-q4_k_m}; do
		model $m
		log "parity $m"
		"$SI" parity $K --model "$MODELS/$m.gguf" --tokens ${PARITY_TOKENS:-256} --json | tee "$OUT/parity-$m.json"
	done
fi

clocks() { # csv of "sm MHz, mem MHz, utilization %" samples: the clocks while the GPU was busy
	python3 - "$1" <<'PY'
import statistics, sys
busy = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    if len(f) == 3 and all(x.isdigit() for x in f) and int(f[2]) >= 50:
        busy.append((int(f[0]), int(f[1])))
if not busy:
    print("clocks under load: no busy samples")
else:
    sm = [b[0] for b in busy]
    print(f"clocks under load ({len(busy)} samples at >= 50% utilization): SM median {statistics.median(sm):.0f} MHz "
          f"(min {min(sm)}, max {max(sm)}), memory median {statistics.median(b[1] for b in busy):.0f} MHz")
PY
}

if has bench; then
	for m in ${BENCH_MODELS:-tinyllama-q8_0 tinyllama-q4_k_m}; do
		model $m
		log "bench $m"
		# the clocks while it runs (a reading before it starts sees an idle GPU)
		nvidia-smi --query-gpu=clocks.sm,clocks.mem,utilization.gpu --format=csv,noheader,nounits -lms 250 > "/tmp/clocks-$m.csv" 2>/dev/null &
		smi=$!
		"$SI" bench --device cuda $K --model "$MODELS/$m.gguf" --ctx ${BENCH_CTX:-128,4096} --tokens ${BENCH_TOKENS:-128} --runs 5 --prefill 512 --json > "$OUT/bench-$m.json" 2> "$OUT/bench-$m.err"
		echo "exit $?"; rm -f "$OUT/bench-$m.err"
		kill $smi 2>/dev/null; wait $smi 2>/dev/null
		clocks "/tmp/clocks-$m.csv"
		python3 - "$OUT/bench-$m.json" <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))
g=r.get("gpu",{})
print(f"{r['model']}: {g.get('name')} copy {g.get('copy_gb_s',0):.0f} GB/s, weights {r['weight_bytes_per_token']/1e6:.1f} MB/token")
for p in r["prefill"]: print(f"  prefill ctx={p['context']:>6} n={p['tokens']:>6} {p['median_tok_s']:>10.1f} tok/s")
for p in r["decode"]: print(f"  decode  ctx={p['context']:>6} {p['median_tok_s']:>10.1f} tok/s  {p.get('roofline_pct',0):.1f}% roofline")
PY
	done
fi

if has gpc; then
	# groups of SMs that share thread block clusters, and streaming shares set by SM (scripts/gpc-probe.cu);
	# writes $OUT/gpc-map.txt, which the trace stage after it (TRACE_SM=1) uses to group the SMs
	log "gpc probe"
	mkdir -p /tmp/ab
	${NVCC:-nvcc} -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o /tmp/ab/gpc-probe scripts/gpc-probe.cu \
		> /tmp/ab/gpc-probe.log 2>&1 || { tail -5 /tmp/ab/gpc-probe.log; exit 1; }
	/tmp/ab/gpc-probe "$OUT/gpc-map.txt" | tee "$OUT/gpc-probe.txt"
fi
if has trace; then
	# where a decode step's time goes, block by block: a -DSK_TRACE=1 build
	# records the start, end and phases of every GEMV and attention block
	# (kernels/README.md); TRACE_MODELS, 16 decode tokens at a TRACE_CTX-token context (default 128);
	# TRACE_LEVEL=2: the GEMVs' prologue split into x loaded, norm and quantization instead;
	# TRACE_SM=1: each SM's lateness (scripts/decode-trace.py), by group of SMs when the gpc stage ran first;
	# TRACE_CO=1: which blocks worked beside a later launch's block on their SM (the next launch, or a third kernel);
	# TRACE_DRAIN=1: each launch's blocks by the launch that came first on their SM after it last held no block;
	# TRACE_FLAGS: more nvcc flags for the traced build (a variant's -D knobs)
	log "trace build ${TRACE_FLAGS:-}"
	mkdir -p /tmp/ab
	build90 /tmp/ab/trace.so kernels/sparkinfer_kernels.cu -DSK_TRACE=${TRACE_LEVEL:-1} ${TRACE_FLAGS:-} > /tmp/ab/trace.log 2>&1 || { tail -5 /tmp/ab/trace.log; exit 1; }
	[ "${TRACE_LEVEL:-1}" = 2 ] && export TRACE_PHASES=xload,norm,quant
	for m in ${TRACE_MODELS:-tinyllama-q8_0}; do
		model $m
		log "trace $m"
		SK_TRACE_OUT=/tmp/ab/trace-$m.csv "$SI" bench --device cuda --kernels /tmp/ab/trace.so --kernels-any-digest-unsafe \
			--model "$MODELS/$m.gguf" --ctx ${TRACE_CTX:-128} --tokens 16 --runs 1 --prefill 16 > /dev/null 2>&1
		GPC_MAP=$([ -f "$OUT/gpc-map.txt" ] && echo "$OUT/gpc-map.txt") python3 scripts/decode-trace.py /tmp/ab/trace-$m.csv > "$OUT/trace-$m.txt"; head -12 "$OUT/trace-$m.txt"; sed -n '/^per kind/,$p' "$OUT/trace-$m.txt"
	done
fi
if has probe; then
	# decode attention alone (scripts/attn-probe.cu): cluster placement limits and per-launch times at
	# TinyLlama's and 7B's shapes up to 16k tokens of context; PROBE_FLAGS adds -D knobs
	log "attention probe"
	mkdir -p /tmp/ab
	${NVCC:-nvcc} -O3 -std=c++17 -Ikernels -gencode arch=compute_90,code=sm_90 ${PROBE_FLAGS:-} -o /tmp/ab/attn-probe \
		scripts/attn-probe.cu -DKSRC="\"$PWD/kernels/sparkinfer_kernels.cu\"" > /tmp/ab/attn-probe.log 2>&1 || { tail -5 /tmp/ab/attn-probe.log; exit 1; }
	/tmp/ab/attn-probe | tee "$OUT/attn-probe.txt"
fi
if has chain; then
	# the launch chain's ceiling (scripts/chain-probe.cu): launches that only stream a 7B Q8_0 layer's bytes at 4k
	# tokens of context, with and without programmatic dependent launch, early loads and an activation read
	# (CHAIN_ARGS: the probe's arguments, e.g. f for only the activation's loads and the counted waits)
	log "chain probe"
	mkdir -p /tmp/ab
	${NVCC:-nvcc} -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o /tmp/ab/chain-probe scripts/chain-probe.cu \
		> /tmp/ab/chain-probe.log 2>&1 || { tail -5 /tmp/ab/chain-probe.log; exit 1; }
	/tmp/ab/chain-probe ${CHAIN_ARGS:-} | tee "$OUT/chain-probe.txt"
fi
if has ab; then
	# A/B of kernel builds in one machine start: AB is a space-separated list
	# of name=source[:nvcc flags, comma-separated] (e.g. "landed=kernels/sparkinfer_kernels.cu
	# wip=.dev/wip/sparkinfer_kernels.cu u3=kernels/sparkinfer_kernels.cu:-DQ4_U=3");
	# each is built for sm_90 in parallel (the BENCH_MODELS are synthesised
	# meanwhile), then decode (and prefill after each context) of every
	# BENCH_MODELS model is timed with each build in turn, AB_ROUNDS times
	# (default 2), so that drift shows. AB_ENVS (a space-separated list of
	# name:VAR=value[,VAR=value]) times each build once per setting of the
	# library's run-time variables (e.g. "all:SPARKINFER_G2_PF_MAX=1000000
	# none:SPARKINFER_G2_PF_MAX=0"); AB_TESTS (a go test -run pattern) first
	# runs those per-op tests with every build (AB_PARITY=N: each build's
	# model parity over N positions); AB_PREFILL (default 512) sets
	# the prefill measured after each context (16: little time spent there).
	log "a/b builds: ${AB:?set AB=name=source[:flags] ...}"
	mkdir -p /tmp/ab
	pids=()
	for spec in $AB; do
		name=${spec%%=*}; rest=${spec#*=}; src=${rest%%:*}; flags=""
		[ "$src" != "$rest" ] && flags=${rest#*:} && flags=${flags//,/ }
		build90 "/tmp/ab/$name.so" "$src" $flags > "/tmp/ab/$name.log" 2>&1 &
		pids+=($!)
	done
	( for m in ${BENCH_MODELS:-tinyllama-q8_0}; do model $m; done ) &
	synth_pid=$!
	for p in "${pids[@]}"; do wait $p; done
	for spec in $AB; do name=${spec%%=*}; [ -f "/tmp/ab/$name.so" ] || { echo "build $name failed:"; tail -5 "/tmp/ab/$name.log"; exit 1; }; done
	log "a/b builds done"
	if [ -n "${AB_TESTS:-}" ]; then
		for spec in $AB; do
			name=${spec%%=*}
			SPARKINFER_KERNELS=/tmp/ab/$name.so "$BIN/cuda.test" -test.run "$AB_TESTS" -test.count=1 -test.v > "$OUT/ab-tests-$name.log" 2>&1
			echo "tests with $name: exit $?, $(grep -c -- '--- PASS' "$OUT/ab-tests-$name.log") passed, $(grep -c -- '--- FAIL' "$OUT/ab-tests-$name.log") failed"
			grep -- '--- FAIL' "$OUT/ab-tests-$name.log" | head -10
		done
	fi
	wait $synth_pid
	# AB_PARITY=N: each build's parity with the CPU reference over N positions
	# of every BENCH_MODELS model first
	if [ -n "${AB_PARITY:-}" ]; then
		for m in ${BENCH_MODELS:-tinyllama-q8_0}; do
			for spec in $AB; do
				name=${spec%%=*}
				"$SI" parity --kernels "/tmp/ab/$name.so" --kernels-any-digest-unsafe --model "$MODELS/$m.gguf" \
					--tokens "$AB_PARITY" --json > "$OUT/ab-parity-$name-$m.json" 2>&1
				echo "parity $m $name exit $?: $(tr -d '\n' < "$OUT/ab-parity-$name-$m.json" | head -c 300)"
			done
		done
	fi
	for round in $(seq ${AB_ROUNDS:-2}); do
		for m in ${BENCH_MODELS:-tinyllama-q8_0}; do
			for spec in $AB; do
				name=${spec%%=*}
				for es in ${AB_ENVS:-default:}; do
					ename=${es%%:*}; evars=${es#*:}; evars=${evars//,/ }
					env $evars "$SI" bench --device cuda --kernels "/tmp/ab/$name.so" --kernels-any-digest-unsafe --model "$MODELS/$m.gguf" \
						--ctx ${BENCH_CTX:-128,4096} --tokens ${BENCH_TOKENS:-128} --runs ${AB_RUNS:-3} --prefill ${AB_PREFILL:-512} --json > /tmp/ab/out.json 2>/tmp/ab/err.txt
					rc=$?
					[ $rc = 0 ] || { echo "round $round $m $name $ename exit $rc: $(tail -1 /tmp/ab/err.txt)"; continue; }
					echo "round $round $m $name $ename: $(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(" ".join("decode@%d %.1f" % (p["context"], p["median_tok_s"]) for p in r["decode"]),
      " ".join("prefill%d@%d %.0f" % (p["tokens"], p["context"], p["median_tok_s"]) for p in r["prefill"]))' /tmp/ab/out.json)"
				done
			done
		done
	done
fi

if has opbench; then
	log "per-op benchmarks (every variant)"
	"$BIN/cuda.test" -test.run '^$' -test.bench "${OPBENCH:-.}" -test.benchtime ${OPBENCH_TIME:-200x} > "$OUT/opbench.log" 2>&1
	echo "opbench exit $?"; grep -E "^Benchmark" "$OUT/opbench.log" | awk '{printf "%-70s %s %s %s %s\n", $1, $3, $4, $5, $6}'
fi

if has variants; then
	for v in 1 2; do
		log "variant $v: stories, parity, bench"
		SPARKINFER_KERNEL_VARIANT=$v "$SI" generate --device cuda $K --temperature 0 --max-tokens 256 > "$OUT/stories.v$v.txt"
		if cmp -s "$OUT/stories.v$v.txt" engine/testdata/stories260K.greedy.txt; then echo "v$v stories260K: IDENTICAL"; else echo "v$v stories260K: DIFFERS"; fi
		for m in ${PARITY_MODELS:-tinyllama-q8_0 tinyllama-q4_k_m}; do
			model $m
			SPARKINFER_KERNEL_VARIANT=$v "$SI" parity $K --model "$MODELS/$m.gguf" --tokens ${PARITY_TOKENS:-256} --json > "$OUT/parity-v$v-$m.json"
			echo "v$v parity $m exit $?: $(tr -d '\n' < "$OUT/parity-v$v-$m.json" | head -c 300)"
		done
		for m in ${BENCH_MODELS:-tinyllama-q8_0 tinyllama-q4_k_m}; do
			SPARKINFER_KERNEL_VARIANT=$v "$SI" bench --device cuda $K --model "$MODELS/$m.gguf" --ctx ${BENCH_CTX:-128,4096} --tokens ${BENCH_TOKENS:-128} --runs 5 --prefill 512 --json > "$OUT/bench-v$v-$m.json" 2> "$OUT/bench-v$v-$m.err"
			echo "v$v bench $m exit $?"; python3 - "$OUT/bench-v$v-$m.json" <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))
for p in r["prefill"]: print(f"  prefill ctx={p['context']:>6} n={p['tokens']:>6} {p['median_tok_s']:>10.1f} tok/s")
for p in r["decode"]: print(f"  decode  ctx={p['context']:>6} {p['median_tok_s']:>10.1f} tok/s  {p.get('roofline_pct',0):.1f}% roofline")
PY
		done
	done
fi

if has profile; then
	# per-kernel GPU time of a short generation (prefill of the prompt, then
	# decode steps replayed from the CUDA graph), from Nsight Compute's
	# counters; clocks left alone
	for m in ${PROFILE_MODELS:-tinyllama-q8_0}; do
		model $m
		log "profile $m: in place (SPARKINFER_PROFILE=1: events between the decode step's launches)"
		SPARKINFER_PROFILE=1 "$SI" bench --device cuda $K --model "$MODELS/$m.gguf" --ctx ${BENCH_CTX:-128,4096} --tokens 64 --runs 1 --prefill ${PROFILE_PREFILL:-512} \
			2>&1 >/dev/null | grep -A40 "kernels profile" | tee "$OUT/kprofile-$m.txt"
		[ "${PROFILE_NCU:-1}" = 1 ] || continue
		log "profile $m: ncu"
		ncu --clock-control none --launch-count ${PROFILE_KERNELS:-700} --csv \
			--metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size \
			"$SI" generate --device cuda $K --model "$MODELS/$m.gguf" --temperature 0 --max-tokens 3 --prompt "Once" \
			> "/tmp/profile-$m.csv" 2> "/tmp/profile-$m.err"
		echo "ncu exit $?"
		# one decode step: from the second-to-last embedding lookup to the last
		python3 - "/tmp/profile-$m.csv" <<'PY' | tee "$OUT/profile-$m.txt"
import csv, collections, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr, data = None, {}
for r in rows:
    if r and r[0] == "ID":
        hdr = r
        continue
    if hdr and len(r) == len(hdr):
        d = dict(zip(hdr, r))
        k = int(d["ID"])
        e = data.setdefault(k, {"name": d["Kernel Name"].split("(")[0][:40], "grid": d["Grid Size"]})
        e[d["Metric Name"]] = float(d["Metric Value"].replace(",", ""))
starts = [k for k in sorted(data) if "get_rows" in data[k]["name"]]
step = [k for k in sorted(data) if starts[-2] <= k < starts[-1]]
agg, tot = collections.OrderedDict(), 0.0
for k in step:
    d = data[k]
    key = (d["name"], d["grid"])
    a = agg.setdefault(key, [0, 0.0, 0.0])
    a[0] += 1; a[1] += d["gpu__time_duration.sum"]; a[2] += d["dram__bytes_read.sum"]
    tot += d["gpu__time_duration.sum"]
print(f"one decode step: {len(step)} kernels, {tot/1e3:.1f} us of kernel time (ncu, serialised)")
for (n, g), a in agg.items():
    print(f"{a[0]:4d} x {n:40s} grid {g:14s} {a[1]/a[0]/1e3:8.2f} us each {a[2]/a[0]/1e6:8.2f} MB {a[2]/max(a[1],1):7.0f} GB/s")
PY
	done
fi

if has repro; then
	# whether this nvcc builds the product library reproducibly (kernels/Makefile)
	log "kernels library built twice (ARCHS=${ARCHS:-90 100 120})"
	OUT=/tmp/kernels-repro scripts/kernels-repro.sh ARCHS="${ARCHS:-90 100 120}" 2>&1 | tee "$OUT/repro.txt"
fi

if has sanitize; then
	log "compute-sanitizer memcheck (short run)"
	compute-sanitizer --tool memcheck --leak-check full "$SI" generate --device cuda $K --temperature 0 --max-tokens 16 > "$OUT/sanitize.log" 2>&1
	echo "sanitizer exit $?"; tail -5 "$OUT/sanitize.log"
fi
log "done"

package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sparkinfer/cc/engine"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdBench measures decode and prefill speed of a model on a device.
func cmdBench(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkinfer", "bench", env)
	modelPath := fs.String("model", "", "GGUF model file (default: the embedded stories260K)")
	device := fs.String("device", "cpu", "device: "+strings.Join(engine.Devices, ", "))
	ctxs := fs.String("ctx", "", "comma-separated contexts at which decode is timed (default 128,512,4096; with --device cuda 128,512,4096,16384,32768)")
	tokens := fs.Int("tokens", 64, "decode steps timed per run")
	runs := fs.Int("runs", 5, "runs per measurement (the median is reported)")
	prefill := fs.Int("prefill", 512, "tokens of the prefill measurements (from an empty cache and after each --ctx)")
	threads := fs.Int("threads", 0, "CPU threads (0: all)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	kernels := fs.String("kernels", "", "CUDA kernels library (default: beside the binary, or $SPARKINFER_KERNELS)")
	anyDigest := fs.Bool("kernels-any-digest-unsafe", false, "load a kernels library whatever its digest (development only)")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if *ctxs == "" {
		*ctxs = defaultBenchContexts(*device)
	}
	var contexts []int
	maxCtx := *prefill
	for _, f := range strings.Split(*ctxs, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return 2, cli.Usagef("bad --ctx entry %q: want positive integers", f)
		}
		contexts = append(contexts, c)
		maxCtx = max(maxCtx, c)
	}
	if *runs < 1 || *tokens < 1 || *prefill < 1 {
		return 2, cli.Usagef("--runs, --tokens and --prefill must be positive")
	}
	// room for the decode steps and for a prefill of --prefill tokens after
	// the largest context
	e, err := openEngine(*modelPath, engine.Options{Device: *device, Threads: *threads, Context: maxCtx + max(*tokens, *prefill),
		Kernels: *kernels, KernelsAnyDigestUnsafe: *anyDigest, ExtendContext: true})
	if err != nil {
		return 2, err
	}
	defer e.Close()
	r, err := e.Bench(engine.BenchConfig{Contexts: contexts, Tokens: *tokens, Runs: *runs, PrefillTokens: *prefill},
		func(s string) { fmt.Fprintf(env.Stderr, "sparkinfer bench: %s\n", s) })
	if err != nil {
		return 1, err
	}
	if *asJSON {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(env.Stdout, "%s\n", b)
		return 0, nil
	}
	w := env.Stdout
	fmt.Fprintf(w, "model:   %s (%s)\ndevice:  %s\ncpu:     %s, %d logical cores\nweights: %.1f MB read per decoded token\ndate:    %s\n\n",
		r.Model, r.Arch, r.Device, r.CPU, r.Cores, float64(r.WeightBytesPerToken)/1e6, r.Date)
	if g := r.GPU; g != nil {
		fmt.Fprintf(w, "gpu:     %s (sm_%s, %d SMs), max SM clock %d MHz, memory clock %d MHz, driver %d\ncopy:    %.0f GB/s measured (device-to-device, read + write)\nkernels: %s\n",
			g.Name, g.ComputeCapability, g.SMs, g.MaxSMClockMHz, g.MemClockMHz, g.Driver, g.CopyGBs, g.KernelsDigest)
		if g.DecodeStep != "" {
			fmt.Fprintf(w, "decode:  %s step\n", g.DecodeStep)
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "phase\tcontext\ttokens\truns\tmedian tok/s\tweights GB/s\t%% roofline\t\n")
	for _, p := range r.Prefill {
		fmt.Fprintf(tw, "prefill\t%d\t%d\t%d\t%.2f\t\t\t\n", p.Context, p.Tokens, len(p.Runs), p.Median)
	}
	for _, p := range r.Decode {
		roof := ""
		if p.RooflinePct > 0 {
			roof = fmt.Sprintf("%.1f", p.RooflinePct)
		}
		fmt.Fprintf(tw, "decode\t%d\t%d\t%d\t%.2f\t%.2f\t%s\t\n", p.Context, p.Tokens, len(p.Runs), p.Median, p.WeightGBs, roof)
	}
	return 0, tw.Flush()
}

// defaultBenchContexts are the decode contexts bench times without --ctx:
// the long ones (16k, 32k) only on the GPU, where they take seconds.
func defaultBenchContexts(device string) string {
	if device == "cuda" {
		return "128,512,4096,16384,32768"
	}
	return "128,512,4096"
}

package main

import (
	"encoding/json"
	"fmt"

	"github.com/sparkinfer/cc/engine/cuda"
	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/model"
	"github.com/sparkinfer/cc/engine/parity"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdParity compares a device backend with the CPU reference on a seeded
// prompt: greedy top-1 agreement and mean KL(cpu || device).
func cmdParity(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkinfer", "parity", env)
	modelPath := fs.String("model", "", "GGUF model (default: the embedded stories260K)")
	device := fs.String("device", "cuda", "candidate device: cuda")
	ref := fs.String("ref", "cpu", "reference device: cpu")
	tokens := fs.Int("tokens", 256, "positions to compare")
	seed := fs.Uint64("seed", 1, "seed of the prompt's token ids")
	threads := fs.Int("threads", 0, "CPU reference threads (0: all cores)")
	kernels := fs.String("kernels", "", "kernels library (default: beside the binary, or $SPARKINFER_KERNELS)")
	anyDigest := fs.Bool("kernels-any-digest-unsafe", false, "load a kernels library whatever its digest (development only)")
	minTop1 := fs.Float64("min-top1", 0, "exit 1 unless top-1 agreement is at least this")
	maxKL := fs.Float64("max-kl", -1, "exit 1 unless mean KL is at most this (negative: no gate)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if *device != "cuda" {
		return 2, cli.Usagef("unsupported --device %q (supported: cuda)", *device)
	}
	if *ref != "cpu" {
		return 2, cli.Usagef("unsupported --ref %q (supported: cpu)", *ref)
	}
	if *tokens < 1 {
		return 2, cli.Usagef("--tokens must be at least 1, got %d", *tokens)
	}
	var f *gguf.File
	var err error
	if *modelPath == "" {
		f, err = gguf.Parse(embedded.Stories260K)
	} else {
		f, err = gguf.Open(*modelPath)
	}
	if err != nil {
		return 2, &cli.UsageError{Err: err}
	}
	defer f.Close()
	m, err := model.Load(f)
	if err != nil {
		return 2, &cli.UsageError{Err: err}
	}
	if *tokens > m.ContextLength {
		return 2, cli.Usagef("--tokens %d exceeds the model's context of %d", *tokens, m.ContextLength)
	}
	dev, _, err := cuda.OpenDevice(*kernels, 0, *anyDigest)
	if err != nil {
		return 1, err
	}
	defer dev.Close()
	gpu, err := cuda.NewBackend(dev, m, *tokens)
	if err != nil {
		return 1, err
	}
	defer gpu.Close()
	cpu := model.NewCPU(m, *threads)
	defer cpu.Close()
	bos := -1
	if v, err := f.Uint("tokenizer.ggml.bos_token_id"); err == nil && v < uint64(m.Vocab) {
		bos = int(v)
	}
	res, err := parity.Compare(cpu, gpu, parity.SeededPrompt(*seed, *tokens, m.Vocab, bos))
	if err != nil {
		return 1, err
	}
	if *asJSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintln(env.Stdout, string(b))
	} else {
		fmt.Fprintf(env.Stdout, "reference:  %s\ncandidate:  %s\npositions:  %d\ntop-1:      %.4f\nmean KL:    %.6f (max %.6f)\nmax |dlogit|: %.4g (max |logit| %.4g)\n",
			res.Reference, res.Candidate, res.Positions, res.Top1Agree, res.MeanKL, res.MaxKL, res.MaxAbsDiff, res.MaxAbsLogit)
	}
	if res.Top1Agree < *minTop1 || (*maxKL >= 0 && res.MeanKL > *maxKL) {
		return 1, fmt.Errorf("parity gate failed: top-1 %.4f (min %.4f), mean KL %.6f (max %.6f)", res.Top1Agree, *minTop1, res.MeanKL, *maxKL)
	}
	return 0, nil
}

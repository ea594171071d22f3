package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sparkinfer/cc/engine/synth"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdSynth writes a synthetic model with random weights and a real vocabulary.
func cmdSynth(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkinfer", "synth", env)
	arch := fs.String("arch", "llama", "architecture: llama or qwen3")
	shape := fs.String("shape", "", "tinyllama-1.1b, llama2-7b, qwen3-8b, or DIMS like dim=256,layers=2,ffn=512,heads=4[,kv_heads=2,head_dim=64,vocab=1000,ctx=256]")
	typ := fs.String("type", "Q8_0", "weight type: F32, F16, Q8_0 or Q4_K_M")
	out := fs.String("out", "", "output GGUF file")
	seed := fs.Uint64("seed", 0, "random seed (the same seed gives the same file)")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if *shape == "" || *out == "" || fs.NArg() != 0 {
		return 2, &cli.UsageError{Err: fmt.Errorf("--shape and --out are required"), Hint: "sparkinfer synth --arch llama --shape tinyllama-1.1b --type Q8_0 --out tinyllama.gguf"}
	}
	if _, ok := synth.FileTypes[*typ]; !ok {
		return 2, cli.Usagef("unknown --type %q (supported: F32, F16, Q8_0, Q4_K_M)", *typ)
	}
	if *arch != "llama" && *arch != "qwen3" {
		return 2, cli.Usagef("unknown --arch %q (supported: llama, qwen3)", *arch)
	}
	sh, err := synth.ParseShape(*arch, *shape)
	if err != nil {
		return 2, &cli.UsageError{Err: err}
	}
	start := time.Now()
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".synth-*.gguf")
	if err != nil {
		return 1, err
	}
	defer os.Remove(tmp.Name())
	if err := synth.Write(tmp, synth.Options{Arch: *arch, Shape: sh, Type: *typ, Seed: *seed}); err != nil {
		tmp.Close()
		return 1, err
	}
	st, err := tmp.Stat()
	if err != nil {
		tmp.Close()
		return 1, err
	}
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp makes 0600 files
		tmp.Close()
		return 1, err
	}
	if err := tmp.Close(); err != nil {
		return 1, err
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return 1, err
	}
	fmt.Fprintf(env.Stdout, "wrote %s: %s %s %s, %.1f MiB in %.1fs\n", *out, *arch, *shape, *typ, float64(st.Size())/(1<<20), time.Since(start).Seconds())
	return 0, nil
}

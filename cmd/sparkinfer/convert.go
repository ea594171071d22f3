package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sparkinfer/cc/engine/convert"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdConvert converts a Hugging Face checkpoint directory to GGUF.
func cmdConvert(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkinfer", "convert", env)
	from := fs.String("from", "", "Hugging Face model directory (config.json, tokenizer.json, *.safetensors)")
	out := fs.String("out", "", "output GGUF file")
	typ := fs.String("type", "F32", "weight type: F32, F16, Q8_0 or Q4_K_M")
	name := fs.String("name", "", "general.name (default: the directory's name)")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if *from == "" || *out == "" || fs.NArg() != 0 {
		return 2, &cli.UsageError{Err: fmt.Errorf("--from and --out are required"), Hint: "sparkinfer convert --from ./Qwen3-0.6B --out qwen3.gguf --type Q8_0"}
	}
	if _, ok := convert.FileTypes[*typ]; !ok {
		return 2, cli.Usagef("unknown --type %q (supported: F32, F16, Q8_0, Q4_K_M)", *typ)
	}
	start := time.Now()
	ck, err := convert.Load(*from)
	if err != nil {
		return 2, &cli.UsageError{Err: err}
	}
	defer ck.Close()
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".convert-*.gguf")
	if err != nil {
		return 1, err
	}
	defer os.Remove(tmp.Name())
	if err := ck.Write(tmp, convert.Options{Type: *typ, Name: *name}); err != nil {
		tmp.Close()
		return 2, &cli.UsageError{Err: err}
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
	fmt.Fprintf(env.Stdout, "wrote %s: %s, %d layers, %s in %.1fs\n", *out, ck.Arch, ck.Config.NumHiddenLayers, *typ, time.Since(start).Seconds())
	return 0, nil
}

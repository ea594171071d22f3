package main

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/sparkinfer/cc/internal/cli"
	"github.com/sparkinfer/cc/reproducible"
)

// cmdVersion prints what this binary is: the source hash it was built from
// (embedded by a release build), its own digest measured now, the toolchain
// and build settings, and the kernels library's digest.
func cmdVersion(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkinfer", "version", env)
	asJSON := fs.Bool("json", false, "print JSON")
	kernels := fs.String("kernels", reproducible.DefaultKernelsPath, "kernels library whose digest to report")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	info, err := reproducible.Describe(*kernels)
	if err != nil {
		return 1, err
	}
	if *asJSON {
		b, err := json.MarshalIndent(info, "", "  ")
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(env.Stdout, "%s\n", b)
		return 0, nil
	}
	w := env.Stdout
	fmt.Fprintf(w, "source hash:    %s\n", info.SourceHash)
	fmt.Fprintf(w, "binary:         %s\n", info.Binary)
	fmt.Fprintf(w, "binary sha256:  %s\n", info.BinarySHA256)
	fmt.Fprintf(w, "go:             %s %s\n", info.GoVersion, info.Platform)
	if info.KernelsSHA256 == reproducible.None {
		fmt.Fprintf(w, "kernels:        none (no file at %q)\n", *kernels)
	} else {
		fmt.Fprintf(w, "kernels:        %s\n", info.Kernels)
		fmt.Fprintf(w, "kernels sha256: %s\n", info.KernelsSHA256)
	}
	keys := make([]string, 0, len(info.Settings))
	for k := range info.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "build settings:\n")
	for _, k := range keys {
		fmt.Fprintf(w, "  %s=%s\n", k, info.Settings[k])
	}
	return 0, nil
}

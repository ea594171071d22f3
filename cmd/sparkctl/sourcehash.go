package main

import (
	"context"
	"fmt"

	"github.com/sparkinfer/cc/internal/cli"
	"github.com/sparkinfer/cc/reproducible"
)

// cmdSourceHash prints the source hash of a git checkout or an exported tree.
func cmdSourceHash(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "source-hash", env)
	manifest := fs.Bool("manifest", false, "print the manifest the hash is computed over instead of the hash")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	dir := "."
	switch fs.NArg() {
	case 0:
	case 1:
		dir = fs.Arg(0)
	default:
		return 2, cli.Usagef("want at most one directory, got %d arguments", fs.NArg())
	}
	m, kind, err := reproducible.DirManifest(context.Background(), dir)
	if err != nil {
		return 2, err
	}
	if *manifest {
		env.Stdout.Write(m.Bytes())
		return 0, nil
	}
	fmt.Fprintln(env.Stdout, m.Hash())
	fmt.Fprintf(env.Stderr, "sparkctl source-hash: %d files (%s)\n", len(m), kind)
	return 0, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sparkinfer/cc/internal/cli"
	"github.com/sparkinfer/cc/reproducible"
	"github.com/sparkinfer/cc/reproducible/release"
)

// cmdRelease runs the reproducible release build (scripts/release.sh calls it).
func cmdRelease(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "release", env)
	out := fs.String("out", "dist", "output directory for the binaries and measurements.json")
	gocache := fs.String("gocache", "", "GOCACHE for the build (default: a fresh temporary one)")
	gopath := fs.String("gopath", "", "GOPATH for the build (default: a fresh temporary one)")
	proxy := fs.String("proxy", "", "GOPROXY for module downloads, checked against go.sum (default: $GOPROXY)")
	epoch := fs.Int64("source-date-epoch", 0, "SOURCE_DATE_EPOCH for a source tree that is not a git checkout")
	only := fs.String("only", "", "comma-separated artifact names to build (default: all)")
	unsafeTC := fs.Bool("unsafe-toolchain", false, "build with a Go other than "+release.PinnedGoVersion+" (not reproducible by others)")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	dir := "."
	switch fs.NArg() {
	case 0:
	case 1:
		dir = fs.Arg(0)
	default:
		return 2, cli.Usagef("want at most one source directory, got %d arguments", fs.NArg())
	}
	if *epoch == 0 {
		if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
			if _, err := fmt.Sscan(v, epoch); err != nil {
				return 2, cli.Usagef("SOURCE_DATE_EPOCH %q is not a number", v)
			}
		}
	}
	opts := release.Options{
		SourceDir: dir, OutDir: *out, GoCache: *gocache, GoPath: *gopath, GoProxy: *proxy,
		SourceDateEpoch: *epoch, UnsafeToolchain: *unsafeTC, Progress: env.Stderr,
	}
	if *gopath != "" {
		opts.GoModCache = *gopath + "/pkg/mod"
	}
	if *only != "" {
		opts.Only = strings.Split(*only, ",")
	}
	m, err := release.Build(context.Background(), opts)
	var te *release.ToolchainError
	if errors.As(err, &te) {
		return 1, &cli.UsageError{Err: err, Hint: "install " + release.PinnedGoVersion + ", or pass --unsafe-toolchain for a build nobody else can reproduce"}
	}
	if err != nil {
		return 1, err
	}
	for _, a := range m.Artifacts {
		fmt.Fprintf(env.Stdout, "%s  %s\n", a.SHA256, a.Name)
	}
	fmt.Fprintf(env.Stdout, "source hash %s\n", m.SourceHash)
	return 0, nil
}

// cmdReproduce rebuilds a release from source in a fresh directory and
// compares digests with measurements.json.
func cmdReproduce(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "reproduce", env)
	source := fs.String("source", "", "source directory (git checkout or export); only tracked files are copied")
	gitRef := fs.String("git", "", "URL@COMMIT to clone instead of --source")
	expect := fs.String("expect", "", "measurements.json of the release to reproduce (required)")
	workdir := fs.String("workdir", "", "work directory (default: a temporary one, removed afterwards)")
	keep := fs.Bool("keep", false, "keep the work directory")
	proxy := fs.String("proxy", "", "GOPROXY for the fresh module cache, checked against go.sum (default: $GOPROXY)")
	unsafeTC := fs.Bool("unsafe-toolchain", false, "allow a Go other than the one in the measurements")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if *expect == "" {
		return 2, cli.Usagef("--expect measurements.json is required")
	}
	if (*source == "") == (*gitRef == "") {
		return 2, cli.Usagef("give exactly one of --source DIR and --git URL@COMMIT")
	}
	b, err := os.ReadFile(*expect)
	if err != nil {
		return 2, err
	}
	exp, err := release.ParseMeasurements(b)
	if err != nil {
		return 2, err
	}
	opts := release.ReproduceOptions{
		SourceDir: *source, Expect: exp, WorkDir: *workdir, Keep: *keep,
		GoProxy: *proxy, UnsafeToolchain: *unsafeTC, Progress: env.Stderr,
	}
	if *gitRef != "" {
		i := strings.LastIndex(*gitRef, "@")
		if i <= 0 || i == len(*gitRef)-1 {
			return 2, cli.Usagef("--git %q: want URL@COMMIT", *gitRef)
		}
		opts.GitURL, opts.GitCommit = (*gitRef)[:i], (*gitRef)[i+1:]
	}
	res, err := release.Reproduce(context.Background(), opts)
	var me *release.MismatchError
	if errors.As(err, &me) {
		return 1, err
	}
	if err != nil {
		var pe *reproducible.ParseError
		var re *release.RecipeError
		if errors.As(err, &pe) || errors.As(err, &re) {
			return 2, err
		}
		return 1, fmt.Errorf("could not rebuild: %w", err)
	}
	for _, c := range res.Comparisons {
		fmt.Fprintf(env.Stdout, "reproduced %s  %s\n", c.Got, c.Name)
	}
	fmt.Fprintf(env.Stdout, "source hash %s: all %d artifacts reproduced bit for bit\n", res.SourceHash, len(res.Comparisons))
	return 0, nil
}

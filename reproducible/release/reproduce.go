package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sparkinfer/cc/reproducible"
)

// ReproduceOptions configure [Reproduce]. Exactly one of SourceDir and
// GitURL is set.
type ReproduceOptions struct {
	// SourceDir is a checkout or source tree; only its tracked files (see
	// package reproducible) are copied into the fresh directory.
	SourceDir string
	// GitURL and GitCommit name a commit to clone instead.
	GitURL, GitCommit string
	// Expect is the measurements to reproduce.
	Expect *Measurements
	// WorkDir holds the fresh source copy, caches and output; empty means a
	// new temporary directory, removed afterwards unless Keep is set.
	WorkDir string
	Keep    bool
	// GoProxy is where the fresh module cache is filled from; every module
	// is checked against the source's go.sum. Empty: the caller's GOPROXY.
	GoProxy string
	// UnsafeToolchain allows a Go other than the one in Expect.
	UnsafeToolchain bool
	// Progress receives one line per step; nil discards.
	Progress io.Writer

	// Test-only hooks: another artifact list, and a shared GOCACHE so that
	// tests of the copy/clone/compare logic need not recompile the standard
	// library. Not settable from outside the package.
	artifacts []Artifact
	goCache   string
}

// Comparison is the outcome for one artifact.
type Comparison struct {
	Name       string `json:"name"`
	Want       string `json:"want"`
	Got        string `json:"got"`
	Reproduced bool   `json:"reproduced"`
}

// Result is what a reproduction found.
type Result struct {
	SourceHash  string        `json:"source_hash"`
	Comparisons []Comparison  `json:"artifacts"`
	Rebuilt     *Measurements `json:"rebuilt"`
	WorkDir     string        `json:"work_dir,omitempty"`
}

// MismatchError is the rejection: the rebuild did not give the expected
// bytes (or the source is not the expected source).
type MismatchError struct {
	What      string // an artifact name, or "source hash"
	Want, Got string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s does not reproduce: expected sha256 %s, rebuilt %s", e.What, e.Want, e.Got)
}

// RecipeError says the expected measurements were made with another recipe
// than this tool's, so a rebuild could not be compared.
type RecipeError struct{ Diff string }

func (e *RecipeError) Error() string {
	return fmt.Sprintf("the measurements were made with a different build recipe (%s); rebuild with the sparkctl of that release", e.Diff)
}

// Reproduce copies or clones the source into a fresh directory, runs the
// release build there with a fresh GOCACHE, GOPATH and module cache, and
// compares every artifact's digest with opts.Expect. It returns a
// *MismatchError (with the Result) if any differ, listing the first; the
// Result lists all.
func Reproduce(ctx context.Context, opts ReproduceOptions) (*Result, error) {
	if (opts.SourceDir == "") == (opts.GitURL == "") {
		return nil, errors.New("give exactly one of a source directory and a git URL")
	}
	if opts.Expect == nil {
		return nil, errors.New("no expected measurements")
	}
	exp := opts.Expect
	r := DefaultRecipe()
	if ok, diff := r.Equal(exp.Recipe); !ok {
		// A toolchain-only difference is the UnsafeToolchain case.
		rr := r
		rr.GoVersion = exp.Recipe.GoVersion
		if ok2, _ := rr.Equal(exp.Recipe); !(ok2 && opts.UnsafeToolchain) {
			return nil, &RecipeError{Diff: diff}
		}
	}

	work := opts.WorkDir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "sparkinfer-reproduce-"); err != nil {
			return nil, err
		}
		if !opts.Keep {
			defer RemoveAll(work)
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	src := filepath.Join(work, "src")
	start := time.Now()
	step := func(n int, format string, args ...any) {
		progress(opts.Progress, "[%d/4 %5s] %s", n, time.Since(start).Round(time.Second), fmt.Sprintf(format, args...))
	}

	if opts.SourceDir != "" {
		m, kind, err := reproducible.DirManifest(ctx, opts.SourceDir)
		if err != nil {
			return nil, err
		}
		step(1, "copying %d tracked files (%s) of %s into %s", len(m), kind, opts.SourceDir, src)
		if err := CopyTree(opts.SourceDir, src, m); err != nil {
			return nil, err
		}
	} else {
		step(1, "cloning %s at %s into %s", opts.GitURL, opts.GitCommit, src)
		if err := clone(ctx, opts.GitURL, opts.GitCommit, src); err != nil {
			return nil, err
		}
	}

	m, _, err := reproducible.DirManifest(ctx, src)
	if err != nil {
		return nil, err
	}
	res := &Result{SourceHash: m.Hash()}
	if opts.Keep {
		res.WorkDir = work
	}
	if res.SourceHash != exp.SourceHash {
		step(2, "source hash %s, expected %s", res.SourceHash, exp.SourceHash)
		return res, &MismatchError{What: "source hash", Want: exp.SourceHash, Got: res.SourceHash}
	}
	step(2, "source hash %s matches", res.SourceHash)

	var only []string
	for _, a := range exp.Artifacts {
		only = append(only, a.Name)
	}
	known := Artifacts
	if opts.artifacts != nil {
		known = opts.artifacts
	}
	for _, name := range only {
		found := false
		for _, a := range known {
			found = found || a.Name == name
		}
		if !found {
			return nil, fmt.Errorf("expected artifact %q is not one this recipe builds", name)
		}
	}
	gocache := filepath.Join(work, "gocache")
	if opts.goCache != "" {
		gocache = opts.goCache
	}
	step(3, "release build with fresh GOCACHE, GOPATH and module cache under %s (GOPROXY %s)", work, proxyOrEnv(opts.GoProxy))
	rebuilt, err := Build(ctx, Options{
		SourceDir:       src,
		OutDir:          filepath.Join(work, "dist"),
		GoCache:         gocache,
		GoPath:          filepath.Join(work, "gopath"),
		GoModCache:      filepath.Join(work, "gopath", "pkg", "mod"),
		GoProxy:         opts.GoProxy,
		SourceDateEpoch: exp.SourceDateEpoch,
		Only:            only,
		Artifacts:       opts.artifacts,
		UnsafeToolchain: opts.UnsafeToolchain,
		Progress:        indent{opts.Progress},
	})
	if err != nil {
		return res, err
	}
	res.Rebuilt = rebuilt
	if rebuilt.CCVersion != exp.CCVersion {
		step(3, "note: C compiler %q, the measurements used %q", rebuilt.CCVersion, exp.CCVersion)
	}

	var first error
	for _, want := range exp.Artifacts {
		c := Comparison{Name: want.Name, Want: want.SHA256}
		for _, got := range rebuilt.Artifacts {
			if got.Name == want.Name {
				c.Got = got.SHA256
			}
		}
		c.Reproduced = c.Got == c.Want
		res.Comparisons = append(res.Comparisons, c)
		if c.Reproduced {
			step(4, "%s: reproduced (sha256 %s)", c.Name, c.Got)
		} else {
			step(4, "%s: MISMATCH: expected %s, rebuilt %s", c.Name, c.Want, c.Got)
			if first == nil {
				first = &MismatchError{What: c.Name, Want: c.Want, Got: c.Got}
			}
		}
	}
	return res, first
}

func proxyOrEnv(p string) string {
	if p != "" {
		return p
	}
	if e := os.Getenv("GOPROXY"); e != "" {
		return e
	}
	return "https://proxy.golang.org,direct"
}

// indent prefixes the build's own progress lines.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	if i.w == nil {
		return len(p), nil
	}
	if _, err := fmt.Fprintf(i.w, "        %s", p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CopyTree copies exactly the files of manifest m from src to a new
// directory dst, keeping execute bits and symbolic links, and checks that
// every copied file still has the digest the manifest says.
func CopyTree(src, dst string, m reproducible.Manifest) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range m {
		from := filepath.Join(src, filepath.FromSlash(e.Path))
		to := filepath.Join(dst, filepath.FromSlash(e.Path))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		switch e.Mode {
		case reproducible.ModeSymlink:
			target, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		default:
			perm := os.FileMode(0o644)
			if e.Mode == reproducible.ModeExecutable {
				perm = 0o755
			}
			b, err := os.ReadFile(from)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, b, perm); err != nil {
				return err
			}
		}
	}
	got, err := reproducible.TreeManifest(dst)
	if err != nil {
		return err
	}
	if got.Hash() != m.Hash() {
		return fmt.Errorf("copy of %s changed while copying (source hash %s, copy %s)", src, m.Hash(), got.Hash())
	}
	return nil
}

func clone(ctx context.Context, url, commit, dst string) error {
	if commit == "" || strings.HasPrefix(commit, "-") || strings.HasPrefix(url, "-") {
		return fmt.Errorf("git source %q@%q: need URL@COMMIT", url, commit)
	}
	run := func(dir string, args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return &BuildError{Step: "git " + strings.Join(args, " "), Err: err, Output: string(out)}
		}
		return nil
	}
	if err := run("", "clone", "--quiet", "--no-checkout", "--", url, dst); err != nil {
		return err
	}
	return run(dst, "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit, "--")
}

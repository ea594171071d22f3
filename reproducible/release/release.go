// Package release is the reproducible release build of sparkinfer and
// sparkctl, and the rebuild-and-compare that checks it.
//
// # The recipe
//
// [Build] runs `go build` once per artifact with a fixed command line and a
// fixed environment ([Recipe]), so that the same source, toolchain and C
// compiler give the same bytes in any directory, with any GOPATH or GOCACHE,
// on any day:
//
//   - the toolchain must be [PinnedGoVersion] (GOTOOLCHAIN=local, so go.mod
//     cannot switch it); another one is refused unless the caller opts out
//     with UnsafeToolchain, and the measurements then say so;
//   - -trimpath (no file system paths), -buildvcs=false (no VCS stamp),
//     -ldflags "-buildid= -s -w -X <source hash>" (no build id, no symbol
//     table or DWARF), -mod=readonly (go.mod and go.sum as committed);
//   - GOENV=off and GOWORK=off, GOOS/GOARCH/GOAMD64 fixed, CGO_ENABLED=1 with
//     CC=gcc and fixed CGO_*FLAGS (no -g), LC_ALL=C, TZ=UTC, and
//     SOURCE_DATE_EPOCH from the last commit (or given for a plain tree).
//
// The environment starts empty: only PATH and TMPDIR (and HOME, unused by Go
// with GOENV=off, but some C compilers look at it) pass through, so a stray
// GOFLAGS, CGO_CFLAGS or GOEXPERIMENT cannot change a release.
//
// The result is written to OutDir with a measurements.json ([Measurements]):
// the digest of each artifact, the source hash, the toolchain and C
// compiler versions, and the recipe itself.
//
// What is not controlled: the C compiler and linker (their versions are
// recorded, not pinned — the Containerfile pins them by image digest), and
// the modules' contents beyond what go.sum pins (go verifies every module
// download against go.sum, so a module proxy cannot change them).
package release

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sparkinfer/cc/reproducible"
)

// PinnedGoVersion is the toolchain releases are built with. It is part of
// the source, so changing it changes the source hash.
const PinnedGoVersion = "go1.26.8"

// Schema names the measurements format.
const Schema = "sparkinfer.dev/measurements/v1"

// Artifact is one binary of a release.
type Artifact struct {
	Name    string // file name in dist/
	Package string // Go package built
}

// Artifacts are the release binaries: the appliance and the client tool.
var Artifacts = []Artifact{
	{Name: "sparkinfer", Package: "./cmd/sparkinfer"},
	{Name: "sparkctl", Package: "./cmd/sparkctl"},
}

// Recipe is the part of a release build that must be equal for two builds
// to be comparable. It is recorded in measurements.json.
type Recipe struct {
	GoVersion string            `json:"go_version"`
	Flags     []string          `json:"flags"`
	LDFlags   string            `json:"ldflags"` // %s is the source hash
	Env       map[string]string `json:"env"`     // besides the per-build paths
}

// DefaultRecipe is the release recipe.
func DefaultRecipe() Recipe {
	return Recipe{
		GoVersion: PinnedGoVersion,
		Flags:     []string{"-trimpath", "-buildvcs=false", "-mod=readonly", "-tags=nomsgpack"},
		LDFlags:   "-buildid= -s -w -X " + reproducible.SourceHashVar + "=%s",
		Env: map[string]string{
			"GOTOOLCHAIN":  "local",
			"GOENV":        "off",
			"GOWORK":       "off",
			"GOFLAGS":      "",
			"GOEXPERIMENT": "",
			"GOOS":         "linux",
			"GOARCH":       "amd64",
			"GOAMD64":      "v1",
			"GOFIPS140":    "off",
			"CGO_ENABLED":  "1",
			"CC":           "gcc",
			"CXX":          "g++",
			"CGO_CFLAGS":   "-O2",
			"CGO_CPPFLAGS": "",
			"CGO_CXXFLAGS": "-O2",
			"CGO_FFLAGS":   "-O2",
			"CGO_LDFLAGS":  "-O2",
			"LC_ALL":       "C",
			"TZ":           "UTC",
		},
	}
}

// Equal reports whether two recipes are the same, and if not, the first
// field that differs.
func (r Recipe) Equal(o Recipe) (bool, string) {
	if r.GoVersion != o.GoVersion {
		return false, fmt.Sprintf("go version %q != %q", r.GoVersion, o.GoVersion)
	}
	if strings.Join(r.Flags, " ") != strings.Join(o.Flags, " ") {
		return false, fmt.Sprintf("flags %q != %q", r.Flags, o.Flags)
	}
	if r.LDFlags != o.LDFlags {
		return false, fmt.Sprintf("ldflags %q != %q", r.LDFlags, o.LDFlags)
	}
	for k, v := range r.Env {
		if w, ok := o.Env[k]; !ok || w != v {
			return false, fmt.Sprintf("env %s=%q != %q", k, v, w)
		}
	}
	for k, w := range o.Env {
		if _, ok := r.Env[k]; !ok {
			return false, fmt.Sprintf("env %s=%q is not in this recipe", k, w)
		}
	}
	return true, ""
}

// Options configure one [Build].
type Options struct {
	// SourceDir is the source tree (a git checkout or an export).
	SourceDir string
	// OutDir receives the binaries and measurements.json.
	OutDir string
	// GoCache, GoPath and GoModCache are the build's caches; empty means
	// fresh directories under a temporary directory removed afterwards.
	GoCache, GoPath, GoModCache string
	// GoProxy and GoSumDB are passed to go; empty means "off" for GOSUMDB
	// (go.sum already pins every module) and the caller's GOPROXY.
	GoProxy, GoSumDB string
	// SourceDateEpoch is used when SourceDir is not a git checkout;
	// for a checkout it is the last commit's time and a non-zero value here
	// must agree with it.
	SourceDateEpoch int64
	// Only restricts the build to these artifact names (nil: all).
	Only []string
	// Artifacts replaces the release's artifact list (nil: [Artifacts]).
	Artifacts []Artifact
	// UnsafeToolchain builds with a Go other than PinnedGoVersion. The
	// measurements record it; such a release is not reproducible by others.
	UnsafeToolchain bool
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// Measurements is measurements.json: what a release build produced.
type Measurements struct {
	Schema          string            `json:"schema"`
	SourceHash      string            `json:"source_hash"`
	SourceKind      reproducible.Kind `json:"source_kind"`
	SourceDateEpoch int64             `json:"source_date_epoch"`
	Platform        string            `json:"platform"`
	CCVersion       string            `json:"cc_version"`
	UnsafeToolchain bool              `json:"unsafe_toolchain,omitempty"`
	Recipe          Recipe            `json:"recipe"`
	Artifacts       []Digest          `json:"artifacts"`
}

// Digest is one artifact's measurement.
type Digest struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// ToolchainError says the go command is not the pinned toolchain.
type ToolchainError struct{ Got, Want string }

func (e *ToolchainError) Error() string {
	return fmt.Sprintf("go toolchain is %q, releases are built with %q", e.Got, e.Want)
}

// BuildError says a build step failed; Output is the tool's output.
type BuildError struct {
	Step   string
	Err    error
	Output string
}

func (e *BuildError) Error() string {
	out := strings.TrimSpace(e.Output)
	if len(out) > 4000 {
		out = "..." + out[len(out)-4000:]
	}
	if out == "" {
		return fmt.Sprintf("%s: %v", e.Step, e.Err)
	}
	return fmt.Sprintf("%s: %v\n%s", e.Step, e.Err, out)
}
func (e *BuildError) Unwrap() error { return e.Err }

func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// buildEnv returns the complete environment of the go command.
func buildEnv(r Recipe, o Options, epoch int64) []string {
	var env []string
	for _, k := range []string{"PATH", "TMPDIR", "HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range r.Env {
		env = append(env, k+"="+v)
	}
	sumdb := o.GoSumDB
	if sumdb == "" {
		sumdb = "off"
	}
	env = append(env,
		"GOCACHE="+o.GoCache, "GOPATH="+o.GoPath, "GOMODCACHE="+o.GoModCache,
		"GOPROXY="+o.GoProxy, "GOSUMDB="+sumdb,
		"SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch, 10))
	return env
}

func runTool(ctx context.Context, dir string, env []string, step, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), &BuildError{Step: step, Err: err, Output: out.String()}
	}
	return out.String(), nil
}

// GitCommitTime returns the committer time of HEAD in the checkout at dir.
func GitCommitTime(ctx context.Context, dir string) (int64, error) {
	cmd := exec.CommandContext(ctx, "git", "log", "-1", "--format=%ct")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return 0, &BuildError{Step: "git log -1 --format=%ct", Err: err}
	}
	return strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
}

// Build runs the release build of opts.SourceDir and writes the artifacts
// and measurements.json to opts.OutDir.
func Build(ctx context.Context, opts Options) (*Measurements, error) {
	r := DefaultRecipe()
	src, err := filepath.Abs(opts.SourceDir)
	if err != nil {
		return nil, err
	}
	out, err := filepath.Abs(opts.OutDir)
	if err != nil {
		return nil, err
	}
	if opts.GoCache == "" || opts.GoPath == "" || opts.GoModCache == "" {
		tmp, err := os.MkdirTemp("", "sparkinfer-release-")
		if err != nil {
			return nil, err
		}
		defer RemoveAll(tmp)
		if opts.GoCache == "" {
			opts.GoCache = filepath.Join(tmp, "gocache")
		}
		if opts.GoPath == "" {
			opts.GoPath = filepath.Join(tmp, "gopath")
		}
		if opts.GoModCache == "" {
			opts.GoModCache = filepath.Join(opts.GoPath, "pkg", "mod")
		}
	}
	for _, p := range []*string{&opts.GoCache, &opts.GoPath, &opts.GoModCache} {
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, err
		}
	}
	if opts.GoProxy == "" {
		opts.GoProxy = os.Getenv("GOPROXY")
		if opts.GoProxy == "" {
			opts.GoProxy = "https://proxy.golang.org,direct"
		}
	}

	m, kind, err := reproducible.DirManifest(ctx, src)
	if err != nil {
		return nil, err
	}
	hash := m.Hash()
	progress(opts.Progress, "source %s: %d files (%s), source hash %s", src, len(m), kind, hash)

	epoch := opts.SourceDateEpoch
	if kind == reproducible.KindGit {
		t, err := GitCommitTime(ctx, src)
		if err != nil {
			return nil, err
		}
		if epoch != 0 && epoch != t {
			return nil, fmt.Errorf("source date epoch %d given, but the last commit is at %d", epoch, t)
		}
		epoch = t
	} else if epoch <= 0 {
		return nil, errors.New("source date epoch required for a source tree that is not a git checkout")
	}

	env := buildEnv(r, opts, epoch)
	gover, err := runTool(ctx, src, env, "go env GOVERSION", "go", "env", "GOVERSION")
	if err != nil {
		return nil, err
	}
	gover = strings.TrimSpace(gover)
	if gover != r.GoVersion {
		if !opts.UnsafeToolchain {
			return nil, &ToolchainError{Got: gover, Want: r.GoVersion}
		}
		progress(opts.Progress, "WARNING: building with %s, not the pinned %s: this release is not reproducible by others", gover, r.GoVersion)
		r.GoVersion = gover
	}
	ccv, err := runTool(ctx, src, env, "cc --version", r.Env["CC"], "--version")
	if err != nil {
		return nil, err
	}
	ccv, _, _ = strings.Cut(ccv, "\n")

	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	meas := &Measurements{
		Schema:          Schema,
		SourceHash:      hash,
		SourceKind:      kind,
		SourceDateEpoch: epoch,
		Platform:        r.Env["GOOS"] + "/" + r.Env["GOARCH"],
		CCVersion:       strings.TrimSpace(ccv),
		UnsafeToolchain: gover != PinnedGoVersion,
		Recipe:          r,
	}
	artifacts := opts.Artifacts
	if artifacts == nil {
		artifacts = Artifacts
	}
	for _, a := range artifacts {
		if opts.Only != nil && !contains(opts.Only, a.Name) {
			continue
		}
		bin := filepath.Join(out, a.Name)
		args := append([]string{"build"}, r.Flags...)
		args = append(args, "-ldflags="+fmt.Sprintf(r.LDFlags, hash), "-o", bin, a.Package)
		start := time.Now()
		progress(opts.Progress, "building %s (%s)", a.Name, a.Package)
		if _, err := runTool(ctx, src, env, "go build "+a.Package, "go", args...); err != nil {
			return nil, err
		}
		d, err := reproducible.FileSHA256(bin)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(bin)
		if err != nil {
			return nil, err
		}
		meas.Artifacts = append(meas.Artifacts, Digest{Name: a.Name, SHA256: d, Size: fi.Size()})
		progress(opts.Progress, "built %s: sha256 %s (%d bytes, %s)", a.Name, d, fi.Size(), time.Since(start).Round(time.Second))
	}
	if len(meas.Artifacts) == 0 {
		return nil, fmt.Errorf("no artifact matches %q", opts.Only)
	}
	b, err := meas.Marshal()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, "measurements.json"), b, 0o644); err != nil {
		return nil, err
	}
	return meas, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Marshal returns the canonical measurements.json bytes.
func (m *Measurements) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// maxMeasurements caps the size of a measurements file.
const maxMeasurements = 1 << 20

// ParseMeasurements reads measurements.json strictly: unknown fields,
// trailing data, a wrong schema, malformed digests or duplicate artifact
// names are errors.
func ParseMeasurements(b []byte) (*Measurements, error) {
	perr := func(err error) error { return &reproducible.ParseError{What: "measurements", Err: err} }
	if len(b) > maxMeasurements {
		return nil, perr(fmt.Errorf("%d bytes is over the %d-byte limit", len(b), maxMeasurements))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Measurements
	if err := dec.Decode(&m); err != nil {
		return nil, perr(err)
	}
	if dec.More() {
		return nil, perr(errors.New("trailing data after the JSON object"))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, perr(errors.New("trailing data after the JSON object"))
	}
	if m.Schema != Schema {
		return nil, perr(fmt.Errorf("schema %q, want %q", m.Schema, Schema))
	}
	if err := reproducible.CheckDigest(m.SourceHash); err != nil {
		return nil, perr(fmt.Errorf("source_hash: %w", err))
	}
	if m.SourceKind != reproducible.KindGit && m.SourceKind != reproducible.KindTree {
		return nil, perr(fmt.Errorf("source_kind %q is not git or tree", m.SourceKind))
	}
	if m.SourceDateEpoch <= 0 {
		return nil, perr(fmt.Errorf("source_date_epoch %d is not positive", m.SourceDateEpoch))
	}
	if m.Recipe.GoVersion == "" || m.Recipe.LDFlags == "" || m.Recipe.Env == nil {
		return nil, perr(errors.New("recipe is incomplete"))
	}
	if strings.Count(m.Recipe.LDFlags, "%s") != 1 || strings.Contains(strings.ReplaceAll(m.Recipe.LDFlags, "%s", ""), "%") {
		return nil, perr(fmt.Errorf("recipe ldflags %q must hold exactly one %%s and no other verb", m.Recipe.LDFlags))
	}
	if len(m.Artifacts) == 0 {
		return nil, perr(errors.New("no artifacts"))
	}
	seen := map[string]bool{}
	for _, a := range m.Artifacts {
		if a.Name == "" || strings.ContainsAny(a.Name, "/\\") || a.Name == "." || a.Name == ".." || a.Name == "measurements.json" {
			return nil, perr(fmt.Errorf("artifact name %q is not a plain file name", a.Name))
		}
		if seen[a.Name] {
			return nil, perr(fmt.Errorf("artifact %q listed twice", a.Name))
		}
		seen[a.Name] = true
		if err := reproducible.CheckDigest(a.SHA256); err != nil {
			return nil, perr(fmt.Errorf("artifact %q: %w", a.Name, err))
		}
		if a.Size <= 0 {
			return nil, perr(fmt.Errorf("artifact %q: size %d is not positive", a.Name, a.Size))
		}
	}
	return &m, nil
}

// RemoveAll removes a tree that may hold Go's read-only module cache.
func RemoveAll(dir string) error {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

package reproducible

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
)

// embeddedSourceHash is set by the release build with
// -ldflags "-X github.com/sparkinfer/cc/reproducible.embeddedSourceHash=<hex>".
// It must stay an uninitialised string variable for -X to work.
var embeddedSourceHash string

// SourceHashVar is the linker name of the variable a release build sets.
const SourceHashVar = "github.com/sparkinfer/cc/reproducible.embeddedSourceHash"

// DevBuild is what a binary without an embedded source hash reports.
const DevBuild = "unknown (dev build)"

// Embedded returns the source hash the linker embedded, and whether there is
// a valid one. A value that is not 64 lowercase hex digits is reported as
// absent (ok false) with an error, never passed on.
func Embedded() (hash string, ok bool, err error) {
	return checkEmbedded(embeddedSourceHash)
}

func checkEmbedded(v string) (string, bool, error) {
	if v == "" {
		return "", false, nil
	}
	if err := CheckDigest(v); err != nil {
		return "", false, fmt.Errorf("embedded source hash: %w", err)
	}
	return v, true, nil
}

// CheckDigest checks that s is a SHA-256 digest in lowercase hex.
func CheckDigest(s string) error {
	if len(s) != 64 {
		return &ParseError{What: "digest", Err: fmt.Errorf("%q is not 64 hex digits", s)}
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return &ParseError{What: "digest", Err: fmt.Errorf("%q is not lowercase hex", s)}
		}
	}
	return nil
}

// Info is what a running binary reports about itself (`sparkinfer version`).
type Info struct {
	// SourceHash is the embedded source hash, or DevBuild.
	SourceHash string `json:"source_hash"`
	// Release is true when a valid source hash is embedded.
	Release bool `json:"release"`
	// Binary is the path of the running executable and BinarySHA256 the
	// SHA-256 of its bytes, read at run time.
	Binary       string `json:"binary"`
	BinarySHA256 string `json:"binary_sha256"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
	// Settings are the toolchain's build settings (debug.BuildInfo.Settings),
	// e.g. -trimpath, -ldflags, CGO_ENABLED, GOAMD64.
	Settings map[string]string `json:"build_settings"`
	// Kernels is the kernels library's path and KernelsSHA256 its digest, or
	// "none" when there is no file at that path.
	Kernels       string `json:"kernels_library"`
	KernelsSHA256 string `json:"kernels_sha256"`
}

// DefaultKernelsPath is where the kernels library is built (kernels/).
const DefaultKernelsPath = "kernels/build/libsparkinfer_kernels.so"

// None marks an absent kernels library.
const None = "none"

// Describe measures the running binary. kernelsPath is the kernels library
// it would load; a missing file gives "none", an unreadable one an error.
func Describe(kernelsPath string) (*Info, error) {
	info := &Info{
		SourceHash: DevBuild,
		GoVersion:  runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		Settings:   map[string]string{},
		Kernels:    kernelsPath,
	}
	h, ok, err := Embedded()
	if err != nil {
		return nil, err
	}
	if ok {
		info.SourceHash, info.Release = h, true
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locate own executable: %w", err)
	}
	info.Binary = exe
	if info.BinarySHA256, err = FileSHA256(exe); err != nil {
		return nil, fmt.Errorf("digest own executable: %w", err)
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			info.Settings[s.Key] = s.Value
		}
	}
	info.KernelsSHA256 = None
	if kernelsPath == "" {
		info.Kernels = None
		return info, nil
	}
	d, err := FileSHA256(kernelsPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		info.Kernels = None
	case err != nil:
		return nil, fmt.Errorf("digest kernels library: %w", err)
	default:
		info.KernelsSHA256 = d
	}
	return info, nil
}

// FileSHA256 returns the SHA-256 of a file's bytes, lowercase hex.
func FileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

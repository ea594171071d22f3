package reproducible

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDescribeDevBuild(t *testing.T) {
	// Tests are dev builds: no source hash is embedded.
	info, err := Describe(filepath.Join(t.TempDir(), "missing.so"))
	if err != nil {
		t.Fatal(err)
	}
	if info.SourceHash != DevBuild || info.Release {
		t.Errorf("source hash %q release %v, want %q false", info.SourceHash, info.Release, DevBuild)
	}
	exe, _ := os.Executable()
	want, err := FileSHA256(exe)
	if err != nil || info.BinarySHA256 != want {
		t.Errorf("binary digest %s, want %s (%v)", info.BinarySHA256, want, err)
	}
	if info.Kernels != None || info.KernelsSHA256 != None {
		t.Errorf("missing kernels library: %q %q, want none", info.Kernels, info.KernelsSHA256)
	}
	if !strings.HasPrefix(info.GoVersion, "go") || info.Settings["GOOS"] == "" {
		t.Errorf("go version %q settings %v", info.GoVersion, info.Settings)
	}

	lib := filepath.Join(t.TempDir(), "lib.so")
	os.WriteFile(lib, []byte("hi\n"), 0o644)
	info, err = Describe(lib)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kernels != lib || info.KernelsSHA256 != "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4" {
		t.Errorf("kernels %q %q", info.Kernels, info.KernelsSHA256)
	}
	if _, err := Describe(t.TempDir()); err == nil { // a directory is not a library
		t.Errorf("a directory as kernels library: no error")
	}
}

func TestEmbeddedValidation(t *testing.T) {
	good := strings.Repeat("ab", 32)
	if h, ok, err := checkEmbedded(good); !ok || err != nil || h != good {
		t.Errorf("valid hash: %q %v %v", h, ok, err)
	}
	if _, ok, err := checkEmbedded(""); ok || err != nil {
		t.Errorf("empty: ok %v err %v, want dev build", ok, err)
	}
	for _, bad := range []string{"abc", strings.ToUpper(good), good + "00", strings.Repeat("g", 64), "unknown (dev build)"} {
		if _, ok, err := checkEmbedded(bad); ok || err == nil {
			t.Errorf("%q: ok %v err %v, want an error", bad, ok, err)
		}
	}
}

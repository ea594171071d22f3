package reproducible

import (
	"bytes"
	"context"
	"errors"
	"github.com/sparkinfer/cc/internal/fuzzseed"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// exampleHash is `sha256sum` of testdata/manifests/example.txt, which was
// written with coreutils' sha256sum (see testdata/README.md).
const exampleHash = "05311edddee52c4febe467e4c495efc432cc2d856bb45ce925e1dc1bd1d44c95"

func writeFile(t *testing.T, name string, data string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, perm); err != nil { // umask-proof
		t.Fatal(err)
	}
}

func TestExampleManifest(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "hi\n", 0o644)
	writeFile(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\n", 0o755)
	m, kind, err := DirManifest(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if kind != KindTree {
		t.Errorf("kind = %q, want tree", kind)
	}
	want, err := os.ReadFile("testdata/manifests/example.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Bytes(); !bytes.Equal(got, want) {
		t.Errorf("manifest:\n%s\nwant:\n%s", got, want)
	}
	if got := m.Hash(); got != exampleHash {
		t.Errorf("hash = %s, want %s", got, exampleHash)
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// newRepo makes a git checkout with a few tracked files of every kind and
// one untracked file.
func newRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is required: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "checkout")
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.com/x\n", 0o644)
	writeFile(t, filepath.Join(dir, "main.go"), "package main\n\nfunc main() {}\n", 0o644)
	writeFile(t, filepath.Join(dir, "scripts/build.sh"), "#!/bin/sh\necho build\n", 0o755)
	writeFile(t, filepath.Join(dir, "dir with space/ü.txt"), "unicode\n", 0o644)
	if err := os.Symlink("../main.go", filepath.Join(dir, "scripts/link")); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "initial")
	writeFile(t, filepath.Join(dir, "untracked.txt"), "not part of the source\n", 0o644)
	return dir
}

func hashDir(t *testing.T, dir string) (string, Kind) {
	t.Helper()
	m, kind, err := DirManifest(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return m.Hash(), kind
}

func TestGitManifest(t *testing.T) {
	dir := newRepo(t)
	h0, kind := hashDir(t, dir)
	if kind != KindGit {
		t.Fatalf("kind = %q, want git", kind)
	}
	m, err := GitManifest(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range m {
		paths = append(paths, e.Path+" "+e.Mode)
	}
	want := "dir with space/ü.txt 100644,go.mod 100644,main.go 100644,scripts/build.sh 100755,scripts/link 120000"
	if got := strings.Join(paths, ","); got != want {
		t.Errorf("entries %q, want %q", got, want)
	}

	t.Run("untracked files do not count", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "more-untracked", "x.go"), "package x\n", 0o644)
		if h, _ := hashDir(t, dir); h != h0 {
			t.Errorf("untracked file changed the hash")
		}
	})
	t.Run("timestamps do not count", func(t *testing.T) {
		old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		for _, p := range []string{"go.mod", "main.go", "scripts/build.sh"} {
			if err := os.Chtimes(filepath.Join(dir, p), old, old); err != nil {
				t.Fatal(err)
			}
		}
		if h, _ := hashDir(t, dir); h != h0 {
			t.Errorf("timestamps changed the hash")
		}
	})
	t.Run("checkout directory does not count", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "elsewhere", "deeper")
		if err := os.MkdirAll(filepath.Dir(other), 0o755); err != nil {
			t.Fatal(err)
		}
		git(t, filepath.Dir(other), "clone", "-q", dir, other)
		if h, kind := hashDir(t, other); h != h0 || kind != KindGit {
			t.Errorf("clone in another directory: hash %s kind %s, want %s git", h, kind, h0)
		}
	})
	t.Run("git archive export hashes the same", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "export")
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
		tar := filepath.Join(t.TempDir(), "src.tar")
		git(t, dir, "archive", "-o", tar, "HEAD")
		cmd := exec.Command("tar", "-xf", tar, "-C", out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar: %v %s", err, b)
		}
		if h, kind := hashDir(t, out); h != h0 || kind != KindTree {
			t.Errorf("export: hash %s kind %s, want %s tree", h, kind, h0)
		}
	})
	t.Run("one changed byte in any tracked file changes it", func(t *testing.T) {
		for _, e := range m {
			if e.Mode == ModeSymlink {
				continue
			}
			p := filepath.Join(dir, filepath.FromSlash(e.Path))
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, i := range []int{0, len(orig) - 1} {
				changed := bytes.Clone(orig)
				changed[i] ^= 0x01
				if err := os.WriteFile(p, changed, 0); err != nil {
					t.Fatal(err)
				}
				if h, _ := hashDir(t, dir); h == h0 {
					t.Errorf("flipping byte %d of %s left the hash unchanged", i, e.Path)
				}
			}
			if err := os.WriteFile(p, orig, 0); err != nil {
				t.Fatal(err)
			}
		}
		if h, _ := hashDir(t, dir); h != h0 {
			t.Fatalf("restoring the files did not restore the hash")
		}
	})
	t.Run("mode changes change it", func(t *testing.T) {
		p := filepath.Join(dir, "main.go")
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if h, _ := hashDir(t, dir); h == h0 {
			t.Errorf("chmod +x left the hash unchanged")
		}
		if err := os.Chmod(p, 0o600); err != nil { // read/write bits do not count
			t.Fatal(err)
		}
		if h, _ := hashDir(t, dir); h != h0 {
			t.Errorf("chmod 600 changed the hash")
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("symlink target counts", func(t *testing.T) {
		l := filepath.Join(dir, "scripts/link")
		if err := os.Remove(l); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../go.mod", l); err != nil {
			t.Fatal(err)
		}
		if h, _ := hashDir(t, dir); h == h0 {
			t.Errorf("retargeting a symlink left the hash unchanged")
		}
		os.Remove(l)
		if err := os.Symlink("../main.go", l); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing tracked file is an error", func(t *testing.T) {
		p := filepath.Join(dir, "go.mod")
		orig, _ := os.ReadFile(p)
		os.Remove(p)
		defer os.WriteFile(p, orig, 0o644)
		_, _, err := DirManifest(context.Background(), dir)
		var se *SourceError
		if !errors.As(err, &se) || se.Path != "go.mod" {
			t.Errorf("err = %v, want *SourceError for go.mod", err)
		}
	})
	if h, _ := hashDir(t, dir); h != h0 {
		t.Fatalf("subtests left the checkout changed")
	}
}

func TestTreeManifestRejects(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), "x", 0o644)
	if err := exec.Command("mkfifo", filepath.Join(dir, "pipe")).Run(); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	_, err := TreeManifest(dir)
	var se *SourceError
	if !errors.As(err, &se) || se.Path != "pipe" {
		t.Errorf("err = %v, want *SourceError for the pipe", err)
	}

	dir = t.TempDir()
	writeFile(t, filepath.Join(dir, "bad\nname"), "x", 0o644)
	if _, err := TreeManifest(dir); !errors.As(err, &se) {
		t.Errorf("newline in a path: err = %v, want *SourceError", err)
	}

	dir = t.TempDir()
	writeFile(t, filepath.Join(dir, "kept"), "x", 0o644)
	writeFile(t, filepath.Join(dir, "sub/.git/config"), "ignored", 0o644)
	m, err := TreeManifest(dir)
	if err != nil || len(m) != 1 || m[0].Path != "kept" {
		t.Errorf("tree with a nested .git: %v %v, want only \"kept\"", m, err)
	}
}

func TestParseManifest(t *testing.T) {
	good, err := os.ReadFile("testdata/manifests/example.txt")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifest(good)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Bytes(), good) || m.Hash() != exampleHash {
		t.Errorf("round trip changed the manifest")
	}
	line0, line1, _ := strings.Cut(string(good), "\n")
	bad := map[string]string{
		"no final newline": strings.TrimSuffix(string(good), "\n"),
		"unsorted":         line1 + line0 + "\n",
		"duplicate":        line0 + "\n" + line0 + "\n",
		"uppercase hex":    strings.ToUpper(line0[:64]) + line0[64:] + "\n",
		"one space":        line0[:64] + line0[65:] + "\n",
		"bad mode":         strings.Replace(line0, "100644", "100664", 1) + "\n",
		"dotdot path":      line0[:74] + "../a.txt\n",
		"absolute path":    line0[:74] + "/a.txt\n",
		"empty path":       line0[:74] + "\n",
		"short line":       "abc\n",
		"crlf":             strings.ReplaceAll(string(good), "\n", "\r\n"),
	}
	for name, in := range bad {
		_, err := ParseManifest([]byte(in))
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: err = %v, want *ParseError", name, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	fuzzseed.Files(f, "testdata/manifests/*.txt")
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			return
		}
		// Whatever parses is canonical: it serialises back to the input.
		if !bytes.Equal(m.Bytes(), b) {
			t.Fatalf("parsed manifest does not round-trip:\n%q\n%q", b, m.Bytes())
		}
	})
}

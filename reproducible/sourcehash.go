package reproducible

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// File modes in git's notation, the only three a manifest may hold.
const (
	ModeRegular    = "100644"
	ModeExecutable = "100755"
	ModeSymlink    = "120000"
)

// Entry is one line of a manifest.
type Entry struct {
	SHA256 [32]byte // of the file's bytes, or of a symlink's target
	Mode   string   // ModeRegular, ModeExecutable or ModeSymlink
	Path   string   // relative, '/'-separated
}

// Manifest is the sorted list of tracked files a source hash is computed
// over. Build one with [GitManifest], [TreeManifest] or [DirManifest], or
// read one with [ParseManifest].
type Manifest []Entry

// Bytes returns the manifest in its canonical text form.
func (m Manifest) Bytes() []byte {
	var b bytes.Buffer
	for _, e := range m {
		b.WriteString(hex.EncodeToString(e.SHA256[:]))
		b.WriteString("  ")
		b.WriteString(e.Mode)
		b.WriteString("  ")
		b.WriteString(e.Path)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Hash returns the source hash: SHA-256 of [Manifest.Bytes], lowercase hex.
func (m Manifest) Hash() string {
	sum := sha256.Sum256(m.Bytes())
	return hex.EncodeToString(sum[:])
}

// Kind says how a directory's tracked files were determined.
type Kind string

const (
	KindGit  Kind = "git"  // git ls-files in a checkout
	KindTree Kind = "tree" // every regular file and symlink, minus .git
)

// DirManifest returns the manifest of dir: of its git index when dir is the
// top of a git checkout (dir/.git exists), otherwise of the whole tree.
func DirManifest(ctx context.Context, dir string) (Manifest, Kind, error) {
	if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
		m, err := GitManifest(ctx, dir)
		return m, KindGit, err
	}
	m, err := TreeManifest(dir)
	return m, KindTree, err
}

// GitTrackedFiles returns the paths `git ls-files` lists in the checkout at
// dir, in git's order. It fails on submodules and on paths a manifest cannot
// hold.
func GitTrackedFiles(ctx context.Context, dir string) ([]string, error) {
	// --stage gives the index mode, so submodules (160000) can be refused.
	cmd := exec.CommandContext(ctx, "git", "-c", "core.quotepath=off", "ls-files", "-z", "--stage")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &SourceError{Path: dir, Err: fmt.Errorf("git ls-files: %v: %s", err, strings.TrimSpace(stderr.String()))}
	}
	var paths []string
	seen := map[string]bool{}
	for _, rec := range bytes.Split(out, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		// "<mode> <object> <stage>\t<path>"
		meta, p, ok := bytes.Cut(rec, []byte{'\t'})
		if !ok {
			return nil, &SourceError{Path: dir, Err: fmt.Errorf("unexpected git ls-files record %q", rec)}
		}
		name := string(p)
		if bytes.HasPrefix(meta, []byte("160000 ")) {
			return nil, &SourceError{Path: name, Err: errors.New("is a submodule; submodules are not supported in a source hash")}
		}
		if err := checkPath(name); err != nil {
			return nil, err
		}
		if !seen[name] { // unmerged paths appear once per stage
			seen[name] = true
			paths = append(paths, name)
		}
	}
	return paths, nil
}

// GitManifest returns the manifest of the files tracked in the git checkout
// at dir, read from the working tree.
func GitManifest(ctx context.Context, dir string) (Manifest, error) {
	paths, err := GitTrackedFiles(ctx, dir)
	if err != nil {
		return nil, err
	}
	m := make(Manifest, 0, len(paths))
	for _, p := range paths {
		e, err := entryFor(dir, p)
		if err != nil {
			return nil, err
		}
		m = append(m, e)
	}
	sortManifest(m)
	return m, nil
}

// TreeManifest returns the manifest of every regular file and symbolic link
// under dir, skipping directories named ".git".
func TreeManifest(dir string) (Manifest, error) {
	var m Manifest
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &SourceError{Path: p, Err: err}
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != dir {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return &SourceError{Path: p, Err: err}
		}
		rel = filepath.ToSlash(rel)
		if err := checkPath(rel); err != nil {
			return err
		}
		e, err := entryFor(dir, rel)
		if err != nil {
			return err
		}
		m = append(m, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortManifest(m)
	return m, nil
}

func entryFor(root, rel string) (Entry, error) {
	full := filepath.Join(root, filepath.FromSlash(rel))
	fi, err := os.Lstat(full)
	if err != nil {
		return Entry{}, &SourceError{Path: rel, Err: err}
	}
	e := Entry{Path: rel}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(full)
		if err != nil {
			return Entry{}, &SourceError{Path: rel, Err: err}
		}
		e.Mode = ModeSymlink
		e.SHA256 = sha256.Sum256([]byte(filepath.ToSlash(target)))
	case fi.Mode().IsRegular():
		e.Mode = ModeRegular
		if fi.Mode().Perm()&0o111 != 0 {
			e.Mode = ModeExecutable
		}
		f, err := os.Open(full)
		if err != nil {
			return Entry{}, &SourceError{Path: rel, Err: err}
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return Entry{}, &SourceError{Path: rel, Err: err}
		}
		copy(e.SHA256[:], h.Sum(nil))
	default:
		return Entry{}, &SourceError{Path: rel, Err: fmt.Errorf("is a %v, not a regular file or symbolic link", fi.Mode().Type())}
	}
	return e, nil
}

func sortManifest(m Manifest) {
	sort.Slice(m, func(i, j int) bool { return m[i].Path < m[j].Path })
}

// checkPath refuses paths that would make a manifest ambiguous or escape the
// source root.
func checkPath(p string) error {
	switch {
	case p == "":
		return &SourceError{Path: p, Err: errors.New("empty path")}
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return &SourceError{Path: p, Err: errors.New("path contains a control character")}
	case strings.HasPrefix(p, "/"):
		return &SourceError{Path: p, Err: errors.New("path is absolute")}
	case strings.Contains(p, "\\"):
		return &SourceError{Path: p, Err: errors.New("path contains a backslash")}
	}
	for _, el := range strings.Split(p, "/") {
		if el == "" || el == "." || el == ".." {
			return &SourceError{Path: p, Err: errors.New("path is not clean")}
		}
	}
	if path.Clean(p) != p {
		return &SourceError{Path: p, Err: errors.New("path is not clean")}
	}
	return nil
}

// maxManifest caps what ParseManifest reads (64 MiB).
const maxManifest = 64 << 20

// ParseManifest reads a manifest in canonical form. It accepts only what
// [Manifest.Bytes] writes: lowercase hex, the three modes, two-space
// separators, clean paths, strictly increasing order, a final newline.
func ParseManifest(b []byte) (Manifest, error) {
	if len(b) > maxManifest {
		return nil, &ParseError{What: "manifest", Err: fmt.Errorf("%d bytes is over the %d-byte limit", len(b), maxManifest)}
	}
	if len(b) == 0 {
		return Manifest{}, nil
	}
	if b[len(b)-1] != '\n' {
		return nil, &ParseError{What: "manifest", Err: errors.New("missing final newline")}
	}
	lines := strings.Split(string(b[:len(b)-1]), "\n")
	m := make(Manifest, 0, len(lines))
	for i, line := range lines {
		e, err := parseLine(line)
		if err != nil {
			return nil, &ParseError{What: fmt.Sprintf("manifest line %d", i+1), Err: err}
		}
		if i > 0 && !(m[i-1].Path < e.Path) {
			return nil, &ParseError{What: fmt.Sprintf("manifest line %d", i+1), Err: fmt.Errorf("path %q is not after %q", e.Path, m[i-1].Path)}
		}
		m = append(m, e)
	}
	return m, nil
}

func parseLine(line string) (Entry, error) {
	const hexLen = 64
	if len(line) < hexLen+2+6+2+1 {
		return Entry{}, fmt.Errorf("line %q is too short", line)
	}
	var e Entry
	h := line[:hexLen]
	if strings.ToLower(h) != h {
		return Entry{}, fmt.Errorf("digest %q is not lowercase hex", h)
	}
	if _, err := hex.Decode(e.SHA256[:], []byte(h)); err != nil {
		return Entry{}, fmt.Errorf("digest %q: %v", h, err)
	}
	rest := line[hexLen:]
	if !strings.HasPrefix(rest, "  ") || rest[8:10] != "  " {
		return Entry{}, fmt.Errorf("line %q: fields must be separated by two spaces", line)
	}
	e.Mode = rest[2:8]
	switch e.Mode {
	case ModeRegular, ModeExecutable, ModeSymlink:
	default:
		return Entry{}, fmt.Errorf("mode %q is not one of 100644, 100755, 120000", e.Mode)
	}
	e.Path = rest[10:]
	if err := checkPath(e.Path); err != nil {
		return Entry{}, err
	}
	return e, nil
}

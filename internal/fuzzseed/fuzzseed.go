// Package fuzzseed seeds Go fuzz targets from real files (imported by
// tests only).
package fuzzseed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Files adds the contents of every file matching the glob patterns to f's
// corpus and fails f when no file matches, so that a fuzz target never runs
// on an empty seed corpus.
func Files(f *testing.F, patterns ...string) {
	f.Helper()
	n := 0
	for _, pat := range patterns {
		files, err := filepath.Glob(pat)
		if err != nil {
			f.Fatalf("seed pattern %q: %v", pat, err)
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
			n++
		}
	}
	if n == 0 {
		f.Fatalf("no seed files match %s", strings.Join(patterns, ", "))
	}
}

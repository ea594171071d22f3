package sevsnp

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/sparkinfer/cc/attest/check"
)

// FuzzParseReport feeds arbitrary bytes to the report parser and, when they
// parse, to claim extraction and to Verify with a real VCEK. Seeded with the
// real reports in testdata.
func FuzzParseReport(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.bin"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seed reports in testdata (%v)", err)
	}
	for _, s := range seeds {
		f.Add(read(f, filepath.Base(s)))
	}
	cert := read(f, "trustee-test-vcek.der")
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseReport(data)
		if err != nil {
			var pe *check.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("untyped parse error: %v", err)
			}
			return
		}
		var c Claims
		r.fillClaims(&c)
		if _, err := r.Verify(context.Background(), cert, Options{Now: asOf}); err != nil {
			var pe *check.ParseError
			var ve *check.VerifyError
			if !errors.As(err, &pe) && !errors.As(err, &ve) {
				t.Fatalf("untyped verify error: %v", err)
			}
		}
	})
}

package sevsnp

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/sparkinfer/cc/attest/check"
)

// FuzzParseReport feeds arbitrary bytes to the report parser and, when they
// parse, to claim extraction and to Verify without a certificate (the
// signature and chain code is exercised on real inputs by TestMutation; it
// costs milliseconds an input, which would starve the fuzzer). Seeded with
// the real reports in testdata.
func FuzzParseReport(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.bin"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seed reports in testdata (%v)", err)
	}
	for _, s := range seeds {
		f.Add(read(f, filepath.Base(s)))
	}
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
		_, err = r.Verify(context.Background(), nil, Options{Now: asOf})
		var ve *check.VerifyError
		if !errors.As(err, &ve) || ve.Check != CheckSigner {
			t.Fatalf("verify without a certificate: err = %v, want a %s failure", err, CheckSigner)
		}
	})
}

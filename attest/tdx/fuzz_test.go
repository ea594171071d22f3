package tdx

import (
	"encoding/base64"
	"errors"
	"testing"

	"github.com/sparkinfer/cc/attest/check"
)

// FuzzParseQuote feeds arbitrary bytes to the parser and, when they parse,
// to the verifier: no panic, and only typed errors.
func FuzzParseQuote(f *testing.F) {
	qs := realQuotes(f)
	if len(qs) == 0 {
		f.Fatal("empty seed corpus")
	}
	for _, q := range qs {
		f.Add(q.raw)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := ParseQuote(b)
		if err != nil {
			var pe *check.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("untyped parse error %v", err)
			}
			return
		}
		cl, err := VerifyQuote(q, Options{AsOf: qs[0].opts.AsOf})
		var ve *check.VerifyError
		var ue *check.UnavailableError
		if cl == nil || (!errors.As(err, &ve) && !errors.As(err, &ue)) {
			t.Fatalf("verify without collateral: claims %v, err %v", cl != nil, err)
		}
	})
}

// FuzzCollateral feeds arbitrary bytes to ParseCollateral.
func FuzzCollateral(f *testing.F) {
	n := 0
	for _, r := range loadReceipts(f)[:4] {
		raw, err := base64.StdEncoding.DecodeString(r.TDX.Collateral)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
		n++
	}
	for _, p := range []string{"testdata/gotdxguest/collateral.json", "testdata/trustee/collateral.json"} {
		f.Add(readFile(f, p))
		n++
	}
	if n == 0 {
		f.Fatal("empty seed corpus")
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCollateral(b)
		if err != nil {
			var pe *check.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(c.TCBInfoIssuer) != 2 || len(c.QEIdentityIssuer) != 2 {
			t.Fatalf("accepted collateral without issuer chains")
		}
		c.validity()
	})
}

// BenchmarkVerifyPolaris verifies a Polaris quote against already parsed
// (cached) collateral: every check, including the go-tdx-guest cross-check.
func BenchmarkVerifyPolaris(b *testing.B) {
	r := loadReceipts(b)[0]
	raw, opts := r.quote(b), Options{AsOf: r.asOf(b), Collateral: r.collateral(b), ReportData: r.wantReportData()}
	b.Run("with-go-tdx-guest-cross-check", func(b *testing.B) {
		for b.Loop() {
			if _, err := Verify(raw, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	opts.SkipCrossCheck = true
	b.Run("own-checks", func(b *testing.B) {
		for b.Loop() {
			if _, err := Verify(raw, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}

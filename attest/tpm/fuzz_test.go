package tpm

import (
	"errors"
	"testing"

	"github.com/sparkinfer/cc/attest/check"
)

func seed(f *testing.F, names ...string) {
	n := 0
	for _, name := range names {
		f.Add(read(f, name))
		n++
	}
	if n == 0 {
		f.Fatal("empty seed corpus")
	}
}

func wantParseError(t *testing.T, err error) {
	var pe *check.ParseError
	if err != nil && !errors.As(err, &pe) {
		t.Fatalf("untyped error: %v", err)
	}
}

// FuzzParseHCLReport parses arbitrary HCL reports and verifies those that
// parse against the real quote, seeded with the real report.
func FuzzParseHCLReport(f *testing.F) {
	seed(f, "hcl-report.bin")
	_, q := parseAll(f)
	rd := tdReportData(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHCLReport(b)
		wantParseError(t, err)
		if err != nil {
			return
		}
		_, _ = h.HardwareReport(), h.hwReportData()
		if _, err := Verify(h, q, rd, challenge); err != nil && !errors.As(err, new(*check.VerifyError)) {
			t.Fatalf("untyped verify error: %v", err)
		}
	})
}

// FuzzParseTPMQuote parses arbitrary quote containers and verifies those that
// parse against the real HCL report, seeded with the real quote.
func FuzzParseTPMQuote(f *testing.F) {
	seed(f, "quote.bin")
	h, _ := parseAll(f)
	rd := tdReportData(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := ParseTPMQuote(b)
		wantParseError(t, err)
		if err != nil {
			return
		}
		if _, err := Verify(h, q, rd, challenge); err != nil && !errors.As(err, new(*check.VerifyError)) {
			t.Fatalf("untyped verify error: %v", err)
		}
	})
}

// FuzzParseEvidenceJSON parses arbitrary evidence JSON, seeded with the real
// evidence.
func FuzzParseEvidenceJSON(f *testing.F) {
	seed(f, "evidence-v1.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := ParseEvidenceJSON(b)
		wantParseError(t, err)
		if err == nil {
			_, err = ParseHCLReport(ev.HCLReport)
			wantParseError(t, err)
		}
	})
}

package tpm

import (
	"errors"
	"testing"

	"github.com/sparkinfer/cc/attest/check"
)

// verifyFiles runs the whole chain on raw files, as a verifier would.
func verifyFiles(hcl, quote, reportData []byte) error {
	h, err := ParseHCLReport(hcl)
	if err != nil {
		return err
	}
	q, err := ParseTPMQuote(quote)
	if err != nil {
		return err
	}
	_, err = Verify(h, q, reportData, challenge)
	return err
}

// TestMutation flips one bit at every position of quote.bin (signature,
// TPMS_ATTEST, PCR values, length prefixes) and of the bound parts of
// hcl-report.bin (header, the embedded hardware report's REPORTDATA and
// padding, request data header, variable data, trailing zeros); every copy
// must be rejected. The parts of the HCL report that nothing binds (the
// header's request_type; the embedded TD report outside REPORTDATA, whose MAC
// only the platform can check) are flipped too and their count of accepted
// flips is printed, not required to be zero: see the package documentation.
func TestMutation(t *testing.T) {
	hcl, quote, rd := read(t, "hcl-report.bin"), read(t, "quote.bin"), tdReportData(t)
	if err := verifyFiles(hcl, quote, rd); err != nil {
		t.Fatal(err)
	}
	const (
		hw  = hwReportOffset
		hwR = hwReportOffset + tdReportDataOff
	)
	regions := []struct {
		name    string
		target  []byte
		lo, hi  int
		unbound bool
	}{
		{"quote.bin signature length+signature", quote, 0, 0x108, false},
		{"quote.bin message length+tpms_attest", quote, 0x108, 0x18a, false},
		{"quote.bin pcr count+pcr values", quote, 0x18a, len(quote), false},
		{"hcl header (but request_type)", hcl, 0, 12, false},
		{"hcl header status+reserved", hcl, 16, hclHeaderSize, false},
		{"hcl td report reportdata", hcl, hwR, hwR + reportDataSize, false},
		{"hcl td report padding", hcl, hw + tdReportSize, reqDataOffset, false},
		{"hcl request data header", hcl, reqDataOffset, varDataOffset, false},
		{"hcl variable data (runtime claims)", hcl, varDataOffset, varDataOffset + 1201, false},
		{"hcl trailing zeros", hcl, varDataOffset + 1201, len(hcl), false},
		{"hcl header request_type", hcl, 12, 16, true},
		{"hcl td report before reportdata", hcl, hw, hwR, true},
		{"hcl td report after reportdata", hcl, hwR + reportDataSize, hw + tdReportSize, true},
	}
	total, rejected := 0, 0
	for _, reg := range regions {
		var tried, parse, verify, accepted int
		for pos := reg.lo; pos < reg.hi; pos++ {
			mask := byte(1) << (pos % 8)
			reg.target[pos] ^= mask
			err := verifyFiles(hcl, quote, rd)
			reg.target[pos] ^= mask
			tried++
			var pe *check.ParseError
			var ve *check.VerifyError
			switch {
			case errors.As(err, &pe):
				parse++
			case errors.As(err, &ve):
				verify++
			case err == nil:
				accepted++
				if !reg.unbound {
					t.Errorf("%s: flip of bit %d at 0x%x was accepted", reg.name, pos%8, pos)
				}
			default:
				t.Errorf("%s: flip at 0x%x gave an untyped error: %v", reg.name, pos, err)
			}
		}
		note := ""
		if reg.unbound {
			note = " (not bound by design)"
		} else {
			total += tried
			rejected += parse + verify
		}
		t.Logf("%-40s %4d flips: %4d parse errors, %4d verify errors, %4d accepted%s", reg.name, tried, parse, verify, accepted, note)
	}
	t.Logf("bound regions: %d flips, %d rejected", total, rejected)
	if total < 200 || rejected != total {
		t.Errorf("bound regions: %d of %d flips rejected", rejected, total)
	}
	if err := verifyFiles(hcl, quote, rd); err != nil {
		t.Fatalf("originals no longer verify: %v", err)
	}
}

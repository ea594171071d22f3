package tpm

import "testing"

// BenchmarkVerify measures parsing the HCL report and the vTPM quote and
// verifying the binding, signature (twice: own check and go-attestation),
// nonce and PCR digest.
func BenchmarkVerify(b *testing.B) {
	hcl, quote, rd := read(b, "hcl-report.bin"), read(b, "quote.bin"), tdReportData(b)
	for b.Loop() {
		if err := verifyFiles(hcl, quote, rd); err != nil {
			b.Fatal(err)
		}
	}
}

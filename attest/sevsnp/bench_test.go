package sevsnp

import (
	"context"
	"testing"
)

// BenchmarkVerify measures one full verification (parse, signature, chain to
// the embedded roots, TCB and chip binding), offline.
func BenchmarkVerify(b *testing.B) {
	raw, cert := read(b, "trustee-test-report.bin"), read(b, "trustee-test-vcek.der")
	for b.Loop() {
		if _, err := Verify(context.Background(), raw, cert, Options{Now: asOf}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseReport measures strict parsing alone.
func BenchmarkParseReport(b *testing.B) {
	raw := read(b, "trustee-test-report.bin")
	for b.Loop() {
		if _, err := ParseReport(raw); err != nil {
			b.Fatal(err)
		}
	}
}

package sim_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"flag"
	"os"
	"testing"

	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/sim"
	"github.com/sparkinfer/cc/internal/fuzzseed"
)

var update = flag.Bool("update", false, "rewrite testdata")

func mintFiles(t testing.TB) (quote, report []byte) {
	q := &sim.Quote{Debug: false, ReportData: [64]byte{1, 2, 3}, MRTD: [48]byte{9}}
	quote = sim.SignQuote(sim.PublicRootKey(), q)
	r := &sim.GPUReport{CCEnabled: true, Nonce: sha256.Sum256([]byte("n")), DriverVersion: "595.58.03", VBIOSVersion: "98.02.81.00.01", Serial: "SIM-GPU-0000"}
	report, err := sim.SignGPUReport(sim.PublicRootKey(), r)
	if err != nil {
		t.Fatal(err)
	}
	return quote, report
}

func TestGoldenAndRoundTrip(t *testing.T) {
	quote, report := mintFiles(t)
	if *update {
		os.WriteFile("testdata/quote.bin", quote, 0o644)
		os.WriteFile("testdata/gpu-report.bin", report, 0o644)
	}
	for name, b := range map[string][]byte{"testdata/quote.bin": quote, "testdata/gpu-report.bin": report} {
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s differs from a fresh mint (deterministic Ed25519)", name)
		}
	}
	q, err := sim.VerifyQuote(quote, sim.PublicRoot())
	if err != nil || q.ReportData[2] != 3 || q.MRTD[0] != 9 || q.Debug {
		t.Fatalf("VerifyQuote: %+v %v", q, err)
	}
	r, err := sim.VerifyGPUReport(report, sim.PublicRoot())
	if err != nil || !r.CCEnabled || r.DevToolsEnabled || r.DriverVersion != "595.58.03" || r.Serial != "SIM-GPU-0000" {
		t.Fatalf("VerifyGPUReport: %+v %v", r, err)
	}
	// Another root rejects; a quote is not a gpu report and vice versa.
	other := ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey)
	var ve *check.VerifyError
	if _, err := sim.VerifyQuote(quote, other); !errors.As(err, &ve) {
		t.Errorf("other root: %v", err)
	}
	var pe *check.ParseError
	if _, err := sim.VerifyGPUReport(quote, sim.PublicRoot()); !errors.As(err, &pe) {
		t.Errorf("quote as gpu report: %v", err)
	}
	if _, err := sim.SignGPUReport(sim.PublicRootKey(), &sim.GPUReport{DriverVersion: "this driver version is too long"}); err == nil {
		t.Error("overlong driver version accepted")
	}
}

func FuzzParseSim(f *testing.F) {
	fuzzseed.Files(f, "testdata/quote.bin", "testdata/gpu-report.bin")
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, err := range []error{
			func() error { _, err := sim.VerifyQuote(b, sim.PublicRoot()); return err }(),
			func() error { _, err := sim.VerifyGPUReport(b, sim.PublicRoot()); return err }(),
		} {
			var pe *check.ParseError
			var ve *check.VerifyError
			if err != nil && !errors.As(err, &pe) && !errors.As(err, &ve) {
				t.Fatalf("untyped error %v", err)
			}
		}
		if q, err := sim.ParseQuote(b); err == nil {
			if again := sim.SignQuote(sim.PublicRootKey(), q); !bytes.Equal(again[:sim.QuoteSigOff], b[:sim.QuoteSigOff]) {
				t.Fatal("parsed quote does not re-encode to the same body")
			}
		}
	})
}

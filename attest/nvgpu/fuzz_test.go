package nvgpu

import (
	"path/filepath"
	"testing"
)

func seeds(f *testing.F, pattern string, decode bool) {
	f.Helper()
	files, _ := filepath.Glob(filepath.Join("testdata", pattern))
	if len(files) == 0 {
		f.Fatalf("no seed files match %q", pattern)
	}
	for _, p := range files {
		b := readTD(f, filepath.Base(p))
		if decode {
			var err error
			if b, err = DecodeReportFile(b); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(b)
	}
}

func FuzzParseReport(f *testing.F) {
	seeds(f, "*AttestationReport.txt", true)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReport(b)
		if err != nil {
			return
		}
		if len(r.Signature) != signatureLen || len(r.Signed)+signatureLen != len(b) {
			t.Fatalf("signature split wrong")
		}
		_ = r.OpaqueStrings()
		_ = VBIOSRIMID(r)
		_ = DriverRIMID(Blackwell, r)
	})
}

func FuzzParseChain(f *testing.F) {
	seeds(f, "*chain*.txt", false)
	seeds(f, "*CertChain.txt", false)
	f.Fuzz(func(t *testing.T, b []byte) {
		certs, err := ParseChain(b)
		if err != nil {
			return
		}
		if len(certs) == 0 {
			t.Fatal("empty chain without error")
		}
		_, _ = CertFWID(certs[0])
		_ = verifyChain(certs, DeviceIdentityRoot(), DeviceIdentityRoot().NotBefore)
	})
}

func FuzzParseRIM(f *testing.F) {
	seeds(f, "*.swidtag", false)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRIM(b)
		if err != nil {
			return
		}
		_ = VerifyRIM(r, nil, r.SigningTime())
	})
}

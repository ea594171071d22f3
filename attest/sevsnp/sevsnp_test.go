package sevsnp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest/check"
)

// asOf lies inside the validity of every certificate in testdata (the VLEK
// expired on 2025-12-10).
var asOf = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

type vector struct {
	name, report, cert string
	signer, product    string
}

var vectors = []vector{
	{"trustee-vcek", "trustee-test-report.bin", "trustee-test-vcek.der", "vcek", "Milan"},
	{"trustee-vlek", "trustee-test-vlek-report.bin", "trustee-test-vlek.der", "vlek", "Milan"},
	{"go-sev-guest-vcek", "go-sev-guest-attestation.bin", "go-sev-guest-vcek.der", "vcek", "Milan"},
}

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerifyRealReports(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			raw := read(t, v.report)
			c, err := Verify(context.Background(), raw, read(t, v.cert), Options{Now: asOf})
			if err != nil {
				t.Fatalf("verify: %v\n%s", err, checksOf(c))
			}
			t.Logf("checks:\n%s", c.Checks)
			if c.Platform != "sev-snp" || c.Signer != v.signer || c.Product != v.product {
				t.Errorf("platform/signer/product = %q/%q/%q, want sev-snp/%q/%q", c.Platform, c.Signer, c.Product, v.signer, v.product)
			}
			want := map[string]check.Status{
				CheckSigner: check.Pass, CheckSignature: check.Pass, CheckChain: check.Pass,
				CheckTCBBinding: check.Pass, CheckRevocation: check.Skipped,
			}
			if v.signer == "vlek" {
				want[CheckChipID] = check.Skipped
			} else {
				want[CheckChipID] = check.Pass
			}
			if len(c.Checks) != len(want) {
				t.Errorf("%d checks ran, want %d:\n%s", len(c.Checks), len(want), c.Checks)
			}
			for name, st := range want {
				got, ok := c.Checks.Find(name)
				if !ok || got.Status != st {
					t.Errorf("check %s = %+v, want %s", name, got, st)
				}
			}
			if got, _ := c.Checks.Find(CheckRevocation); got.Reason != "offline: no getter, amd crl not fetched" {
				t.Errorf("revocation reason %q", got.Reason)
			}
			// Claims are the report's bytes.
			if c.Measurement != hex.EncodeToString(raw[0x90:0xC0]) || c.ReportData != hex.EncodeToString(raw[0x50:0x90]) ||
				c.HostData != hex.EncodeToString(raw[0xC0:0xE0]) || c.ChipID != hex.EncodeToString(raw[0x1A0:0x1E0]) {
				t.Errorf("claims do not match the report's bytes: %+v", c)
			}
			if !c.AsOf.Equal(asOf) {
				t.Errorf("as_of %v", c.AsOf)
			}
			if _, err := json.Marshal(c); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestClaimsOfTrusteeVCEKReport(t *testing.T) {
	c, err := Verify(context.Background(), read(t, "trustee-test-report.bin"), read(t, "trustee-test-vcek.der"), Options{Now: asOf})
	if err != nil {
		t.Fatal(err)
	}
	// Values read by hand from the report (offsets in the SNP ABI spec).
	if c.Version != 2 || c.GuestSVN != 4 || c.VMPL != 0 || c.ProductName != "Milan-B0" {
		t.Errorf("version/guest svn/vmpl/product name = %d/%d/%d/%q", c.Version, c.GuestSVN, c.VMPL, c.ProductName)
	}
	if c.Policy.Raw != "0x3001f" || c.Policy.Debug || !c.Policy.SMT || c.Policy.MigrateMA || c.Policy.ABIMinor != 0x1f {
		t.Errorf("policy %+v", c.Policy)
	}
	if c.TCB.Reported.Raw != "0x7308000000000003" || *c.TCB.Reported.Microcode != 0x73 || *c.TCB.Reported.SNP != 8 || *c.TCB.Reported.BootLoader != 3 {
		t.Errorf("reported tcb %+v", c.TCB.Reported)
	}
	if c.Measurement != "a1f3930413247bb38cfc171579ea3c12d5fe4901f0c792f63fd75d98f1ef827c23500644e0e692e6be917f9050d3d38c" {
		t.Errorf("measurement %s", c.Measurement)
	}
}

func TestDebugPolicyClaim(t *testing.T) {
	c, err := Verify(context.Background(), read(t, "go-sev-guest-attestation.bin"), read(t, "go-sev-guest-vcek.der"), Options{Now: asOf})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Policy.Debug || !c.Policy.SMT || c.Policy.Raw != "0xb0000" {
		t.Errorf("policy %+v, want debug and smt allowed", c.Policy)
	}
}

func TestExpiredCertificateRejected(t *testing.T) {
	// The VLEK certificate expired on 2025-12-10.
	c, err := Verify(context.Background(), read(t, "trustee-test-vlek-report.bin"), read(t, "trustee-test-vlek.der"),
		Options{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	var ve *check.VerifyError
	if !errors.As(err, &ve) || ve.Check != CheckChain {
		t.Fatalf("err = %v, want a verify error from %s", err, CheckChain)
	}
	if got, _ := c.Checks.Find(CheckSignature); got.Status != check.Pass {
		t.Errorf("signature check %+v, want pass (only the chain is out of date)", got)
	}
}

func TestWrongCertificateRejected(t *testing.T) {
	// VCEK report with the other VCEK: the signature fails, the chain passes.
	c, err := Verify(context.Background(), read(t, "trustee-test-report.bin"), read(t, "go-sev-guest-vcek.der"), Options{Now: asOf})
	var ve *check.VerifyError
	if !errors.As(err, &ve) || ve.Check != CheckSignature {
		t.Fatalf("err = %v, want a verify error from %s", err, CheckSignature)
	}
	if got, _ := c.Checks.Find(CheckTCBBinding); got.Status != check.Fail {
		t.Errorf("tcb binding %+v, want fail", got)
	}
	if got, _ := c.Checks.Find(CheckChipID); got.Status != check.Fail {
		t.Errorf("chip id %+v, want fail", got)
	}
	// VCEK report with the VLEK certificate: rejected as well.
	if _, err := Verify(context.Background(), read(t, "trustee-test-report.bin"), read(t, "trustee-test-vlek.der"), Options{Now: asOf}); !errors.As(err, &ve) {
		t.Fatalf("vcek report with vlek certificate: err = %v, want a verify error", err)
	}
	// No certificate.
	if _, err := Verify(context.Background(), read(t, "trustee-test-report.bin"), nil, Options{Now: asOf}); !errors.As(err, &ve) || ve.Check != CheckSigner {
		t.Fatalf("no certificate: err = %v", err)
	}
}

func TestTamperedReportRejected(t *testing.T) {
	raw := read(t, "trustee-test-report.bin")
	cert := read(t, "trustee-test-vcek.der")
	for _, tc := range []struct {
		name string
		off  int
	}{{"measurement", 0x90}, {"report_data", 0x50}, {"policy debug bit", 0x0A}, {"signature r", 0x2A0}, {"signature s", 0x2E8}} {
		b := append([]byte(nil), raw...)
		if tc.name == "policy debug bit" {
			b[tc.off] |= 0x08 // bit 19 of the policy
		} else {
			b[tc.off] ^= 1
		}
		_, err := Verify(context.Background(), b, cert, Options{Now: asOf})
		var ve *check.VerifyError
		if !errors.As(err, &ve) || ve.Check != CheckSignature {
			t.Errorf("%s: err = %v, want a signature failure", tc.name, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	raw := read(t, "trustee-test-report.bin")
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"truncated", raw[:1183]},
		{"trailing byte", append(append([]byte(nil), raw...), 0)},
		{"version 1", func() []byte { b := append([]byte(nil), raw...); b[0] = 1; return b }()},
		{"reserved after s", func() []byte { b := append([]byte(nil), raw...); b[0x400] = 1; return b }()},
		{"high byte of r", func() []byte { b := append([]byte(nil), raw...); b[0x2A0+50] = 1; return b }()},
		{"signature algorithm", func() []byte { b := append([]byte(nil), raw...); b[0x34] = 2; return b }()},
		{"reserved signer bits", func() []byte { b := append([]byte(nil), raw...); b[0x4B] = 0x80; return b }()},
	} {
		_, err := ParseReport(tc.b)
		var pe *check.ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: err = %v, want a parse error", tc.name, err)
		}
	}
	// A certificate that is not DER.
	_, err := Verify(context.Background(), raw, []byte("not a certificate"), Options{Now: asOf})
	var pe *check.ParseError
	if !errors.As(err, &pe) {
		t.Errorf("garbage certificate: err = %v, want a parse error", err)
	}
}

type getterFunc func(url string) ([]byte, error)

func (f getterFunc) Get(url string) ([]byte, error) { return f(url) }

func TestRevocationOnline(t *testing.T) {
	raw, cert := read(t, "trustee-test-report.bin"), read(t, "trustee-test-vcek.der")
	var asked []string
	down := getterFunc(func(url string) ([]byte, error) {
		asked = append(asked, url)
		return nil, errors.New("network is down")
	})
	c, err := Verify(context.Background(), raw, cert, Options{Now: asOf, Getter: down})
	if err != nil {
		t.Fatalf("an unreachable crl must not reject: %v", err)
	}
	if got, _ := c.Checks.Find(CheckRevocation); got.Status != check.Skipped || got.Reason[:12] != "unavailable:" {
		t.Errorf("revocation %+v, want skipped: unavailable", got)
	}
	if len(asked) == 0 || asked[0] != "https://kdsintf.amd.com/vcek/v1/Milan/crl" {
		t.Errorf("asked %q", asked)
	}

	// The VLEK's CRL comes from the ASVK's distribution point.
	asked = nil
	if _, err := Verify(context.Background(), read(t, "trustee-test-vlek-report.bin"), read(t, "trustee-test-vlek.der"), Options{Now: asOf, Getter: down}); err != nil {
		t.Fatal(err)
	}
	if len(asked) == 0 || asked[0] != "https://kdsintf.amd.com/vlek/v1/Milan/crl" {
		t.Errorf("vlek: asked %q", asked)
	}

	// A CRL not signed by the ARK is a rejection, not an unavailability.
	forged := forgedCRL(t)
	c, err = Verify(context.Background(), raw, cert, Options{Now: asOf, Getter: getterFunc(func(string) ([]byte, error) { return forged, nil })})
	var ve *check.VerifyError
	if !errors.As(err, &ve) || ve.Check != CheckRevocation {
		t.Fatalf("forged crl: err = %v, want a verify error from %s\n%s", err, CheckRevocation, checksOf(c))
	}
}

func forgedCRL(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ARK-Milan"},
		NotBefore: asOf.Add(-time.Hour), NotAfter: asOf.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCRLSign | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	issuer, _ := x509.ParseCertificate(der)
	crl, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: asOf.Add(-time.Hour), NextUpdate: asOf.Add(time.Hour)}, issuer, key)
	if err != nil {
		t.Fatal(err)
	}
	return crl
}

func checksOf(c *Claims) string {
	if c == nil {
		return "(no claims)"
	}
	return c.Checks.String()
}

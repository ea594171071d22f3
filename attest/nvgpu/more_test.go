package nvgpu

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest/check"
)

func TestEmbeddedRoots(t *testing.T) {
	root := DeviceIdentityRoot()
	if err := root.CheckSignatureFrom(root); err != nil {
		t.Fatalf("device root not self-signed: %v", err)
	}
	for _, f := range []string{"trustee-hopper_cert_chain_case1.txt", "trustee-blackwell_cert_chain_case1.txt", "trustee-hopper_cert_chain_case2.txt", "trustee-blackwell_cert_chain_case2.txt", "nvtrust-hopperCertChain.txt"} {
		certs, err := ParseChain(readTD(t, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(certs[len(certs)-1].Raw, root.Raw) {
			t.Errorf("%s: last certificate is not the embedded root", f)
		}
	}
	rr := RIMRoot()
	if err := rr.CheckSignatureFrom(rr); err != nil {
		t.Fatalf("rim root not self-signed: %v", err)
	}
	for _, f := range rimFiles {
		r, err := ParseRIM(readTD(t, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Certs[len(r.Certs)-1].Raw, rr.Raw) {
			t.Errorf("%s: last keyinfo certificate is not the embedded rim root", f)
		}
	}
}

// TestClaimsMatchIndependentVerifier compares every measurement and every
// version / identity field with the claims Trustee's verifier parsed.
func TestClaimsMatchIndependentVerifier(t *testing.T) {
	for _, tc := range []struct{ claims, report, chain, nonce string }{
		{"trustee-hopperAttestationReport-claims.txt", "trustee-hopperAttestationReport.txt", "trustee-hopper_cert_chain_case1.txt", hopperNonce},
		{"trustee-blackwellAttestationReport-claims.txt", "trustee-blackwellAttestationReport.txt", "trustee-blackwell_cert_chain_case1.txt", blackwellNonce},
	} {
		t.Run(tc.claims, func(t *testing.T) {
			var want struct {
				Arch         string            `json:"arch"`
				UEID         string            `json:"ueid"`
				Config       map[string]any    `json:"config"`
				Measurements map[string]string `json:"measurements"`
			}
			if err := json.Unmarshal(readTD(t, tc.claims), &want); err != nil {
				t.Fatal(err)
			}
			c, err := Verify(reportTD(t, tc.report), readTD(t, tc.chain), Options{Nonce: mustHex(tc.nonce)})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.EqualFold(want.Arch, string(c.Arch)) {
				t.Errorf("arch %s, want %s", c.Arch, want.Arch)
			}
			if want.UEID != "" && want.UEID != c.Chain.LeafSerial {
				t.Errorf("ueid %s, want %s", c.Chain.LeafSerial, want.UEID)
			}
			if len(c.Measurements) != len(want.Measurements) {
				t.Errorf("%d measurements, want %d", len(c.Measurements), len(want.Measurements))
			}
			for _, m := range c.Measurements {
				if w := want.Measurements[strconv.Itoa(m.Index)]; w != m.Digest {
					t.Errorf("measurement %d = %s, want %s", m.Index, m.Digest, w)
				}
			}
			compared := 0
			for k, v := range want.Config {
				var got string
				switch k {
				case "fwid":
					got = c.FWID
				case "driver_version":
					got = c.DriverVersion
				case "vbios_version":
					got = c.VBIOSVersion
				case "measurement_count":
					r, _ := ParseReport(reportTD(t, tc.report))
					m := map[string]any{}
					for i, n := range r.MeasurementCount {
						m[strconv.Itoa(i+1)] = float64(n)
					}
					if fmt.Sprint(m) != fmt.Sprint(v) {
						t.Errorf("measurement_count %v, want %v", m, v)
					}
					compared++
					continue
				case "nvdec0_status", "protected_pcie_status":
					if v == "U" { // this claims file predates the field's decoding
						continue
					}
					got = c.Opaque[k]
				default:
					got = c.Opaque[k]
				}
				if got != fmt.Sprint(v) {
					t.Errorf("%s = %q, want %q", k, got, fmt.Sprint(v))
				}
				compared++
			}
			t.Logf("compared %d measurements and %d config fields", len(c.Measurements), compared)
		})
	}
}

func TestWrongNonceRejected(t *testing.T) {
	for _, tc := range realCases {
		n := mustHex(tc.nonce)
		n[31] ^= 1
		c, err := Verify(reportTD(t, tc.report), readTD(t, tc.chain), Options{Nonce: n})
		var ve *check.VerifyError
		if !errors.As(err, &ve) || ve.Check != CheckNonce || c.Verified || c.NonceVerified {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
}

func TestNoNonceIsSkippedNotPassed(t *testing.T) {
	c, err := Verify(reportTD(t, realCases[0].report), readTD(t, realCases[0].chain), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ck, _ := c.Checks.Find(CheckNonce); ck.Status != check.Skipped || c.NonceVerified {
		t.Errorf("nonce check %+v", ck)
	}
}

func TestChainValidityAsOf(t *testing.T) {
	// Blackwell certificates start 2023-06-20: verifying as of 2023-01-01 must fail.
	_, err := Verify(reportTD(t, "trustee-blackwellAttestationReport.txt"), readTD(t, "trustee-blackwell_cert_chain_case1.txt"),
		Options{AsOf: time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)})
	var ce *ChainError
	if !errors.As(err, &ce) || ce.Reason != ChainExpired {
		t.Fatalf("err %v", err)
	}
}

func TestWrongLeafRejected(t *testing.T) {
	// The Hopper report with the Blackwell chain: signature must fail.
	_, err := Verify(reportTD(t, "trustee-hopperAttestationReport.txt"), readTD(t, "trustee-blackwell_cert_chain_case1.txt"), Options{})
	var ve *check.VerifyError
	if !errors.As(err, &ve) || ve.Check != CheckSignature {
		t.Fatalf("err %v", err)
	}
}

var rimFiles = []string{"nvtrust-1010_0200_882_96005E0001_PROD.swidtag", "nvtrust-g520_0200_885_9600740001_PROD.swidtag"}

func TestRIMsVerify(t *testing.T) {
	for _, f := range rimFiles {
		r, err := ParseRIM(readTD(t, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifyRIM(r, nil, time.Time{}); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		active := 0
		for _, g := range r.Measurements {
			if g.Active {
				active++
			}
		}
		t.Logf("%s: version %s, %d measurements (%d active), signer %q issued %s", f, r.Version, len(r.Measurements), active, r.Certs[0].Subject.CommonName, r.SigningTime().Format(time.RFC3339))
		// The signer certificates are short-lived: as of 2026 the chain is expired.
		var ce *ChainError
		if err := VerifyRIM(r, nil, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); !errors.As(err, &ce) || ce.Reason != ChainExpired {
			t.Errorf("%s as of 2026: %v", f, err)
		}
	}
}

func TestRIMTamperRejected(t *testing.T) {
	orig := readTD(t, rimFiles[0])
	for _, tc := range []struct{ name, from, to, check string }{
		{"golden hash attribute", `ns2:Hash0="c3f65ef7`, `ns2:Hash0="c3f65ef8`, "nvgpu.rim.digest"},
		{"active attribute", `index="7" active="False"`, `index="7" active="True"`, "nvgpu.rim.digest"},
		{"meta version attribute", `colloquialVersion="96.00.5E.00.01"`, `colloquialVersion="96.00.5E.00.02"`, "nvgpu.rim.digest"},
		{"digest value", `<ds:DigestValue>D3Bc`, `<ds:DigestValue>D3Bd`, "nvgpu.rim.signature"},
		{"signature method attribute order", `<ds:Reference URI="">`, `<ds:Reference URI="" Id="x">`, "nvgpu.rim.signature"},
	} {
		b := bytes.Replace(orig, []byte(tc.from), []byte(tc.to), 1)
		if bytes.Equal(b, orig) {
			t.Fatalf("%s: pattern %q not found", tc.name, tc.from)
		}
		r, err := ParseRIM(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = VerifyRIM(r, nil, time.Time{})
		var ve *check.VerifyError
		if !errors.As(err, &ve) || ve.Check != tc.check {
			t.Errorf("%s: err %v, want %s", tc.name, err, tc.check)
		}
	}
}

// TestRIMComparisonHonest compares the Hopper report (VBIOS 96.00.9f.00.01)
// with the two shared VBIOS RIMs (96.00.5E.00.01, 96.00.74.00.01): they are
// for other VBIOS builds, so some blocks match and others do not.
func TestRIMComparisonHonest(t *testing.T) {
	rep, err := ParseReport(reportTD(t, "trustee-hopperAttestationReport.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rimFiles {
		r, _ := ParseRIM(readTD(t, f))
		mi, err := CompareMeasurements(rep, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s vs report (vbios %s): matched %v mismatched %v missing %v", r.Version, rep.VBIOSVersion, mi.Matched, mi.Mismatched, mi.Missing)
		if len(mi.Mismatched) == 0 || len(mi.Matched) == 0 {
			t.Errorf("expected a partial match against another vbios build")
		}
	}

	// Through Verify with a RIM cache: files named by their own ids are not
	// the ids the report asks for, so RIM checks are skipped.
	dir := t.TempDir()
	for id, f := range map[string]string{"NV_GPU_VBIOS_1010_0200_882_96005E0001": rimFiles[0], "NV_GPU_VBIOS_G520_0200_885_9600740001": rimFiles[1]} {
		if err := os.WriteFile(filepath.Join(dir, id), readTD(t, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Verify(rep.Raw, readTD(t, "trustee-hopper_cert_chain_case1.txt"), Options{RIMDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if ck, _ := c.Checks.Find(CheckVBIOSRIM); ck.Status != check.Skipped || !strings.Contains(ck.Reason, "NV_GPU_VBIOS_1010_0200_882_96009F0001") {
		t.Errorf("vbios rim check %+v", ck)
	}
	// A RIM for another VBIOS placed under the report's id is refused.
	if err := os.WriteFile(filepath.Join(dir, "NV_GPU_VBIOS_1010_0200_882_96009F0001.swidtag"), readTD(t, rimFiles[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = Verify(rep.Raw, readTD(t, "trustee-hopper_cert_chain_case1.txt"), Options{RIMDir: dir})
	var ve *check.VerifyError
	if !errors.As(err, &ve) || ve.Check != CheckVBIOSRIM || c.Verified {
		t.Errorf("mislabelled rim: err %v", err)
	}
}

// TestMutations flips one byte at >= 200 positions spread over each real
// report (signed body and signature) and its certificates (DER): every flip
// must be rejected, as a verification failure or as unusable input.
func TestMutations(t *testing.T) {
	for _, tc := range realCases {
		t.Run(tc.name, func(t *testing.T) {
			rep := reportTD(t, tc.report)
			chain := readTD(t, tc.chain)
			opts := Options{Nonce: mustHex(tc.nonce)}
			if _, err := Verify(rep, chain, opts); err != nil {
				t.Fatal(err)
			}
			var ders [][]byte
			for rest := chain; ; {
				var b *pem.Block
				if b, rest = pem.Decode(rest); b == nil {
					break
				}
				ders = append(ders, b.Bytes)
			}
			encode := func(ds [][]byte) []byte {
				var out []byte
				for _, d := range ds {
					out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d})...)
				}
				return out
			}
			var total, parse, verify int
			try := func(where string, r, c []byte) {
				total++
				_, err := Verify(r, c, opts)
				var pe *check.ParseError
				var ve *check.VerifyError
				switch {
				case errors.As(err, &pe):
					parse++
				case errors.As(err, &ve):
					verify++
				default:
					t.Errorf("flip at %s accepted (err %v)", where, err)
				}
			}
			// Report: 150 positions over the signed part, 40 over the signature.
			signed := len(rep) - signatureLen
			for i := 0; i < 150; i++ {
				p := i * signed / 150
				m := bytes.Clone(rep)
				m[p] ^= 0x01
				try(fmt.Sprintf("report byte %d", p), m, chain)
			}
			for i := 0; i < 40; i++ {
				p := signed + i*signatureLen/40
				m := bytes.Clone(rep)
				m[p] ^= 0x80
				try(fmt.Sprintf("signature byte %d", p), m, chain)
			}
			// Certificates: 25 positions in each DER.
			for ci, d := range ders {
				for i := 0; i < 25; i++ {
					p := i * len(d) / 25
					ds := make([][]byte, len(ders))
					copy(ds, ders)
					ds[ci] = bytes.Clone(d)
					ds[ci][p] ^= 0x01
					try(fmt.Sprintf("cert %d byte %d", ci, p), rep, encode(ds))
				}
			}
			t.Logf("%s: %d flips, %d rejected as unusable input, %d rejected by verification, %d accepted", tc.name, total, parse, verify, total-parse-verify)
			if total < 200 {
				t.Errorf("only %d positions", total)
			}
		})
	}
}

func TestParseErrorsTyped(t *testing.T) {
	rep := reportTD(t, realCases[2].report)
	for _, b := range [][]byte{nil, rep[:40], rep[:len(rep)-1], append(bytes.Clone(rep), 0)} {
		if _, err := ParseReport(b); !errors.As(err, new(*check.ParseError)) {
			t.Errorf("len %d: %v", len(b), err)
		}
	}
	if _, err := DecodeReportFile([]byte("zz")); !errors.As(err, new(*check.ParseError)) {
		t.Errorf("bad hex: %v", err)
	}
	if raw, err := DecodeReportFile(rep); err != nil || !bytes.Equal(raw, rep) {
		t.Errorf("binary input not accepted: %v", err)
	}
	if _, err := ParseChain([]byte("garbage")); !errors.As(err, new(*check.ParseError)) {
		t.Errorf("chain: %v", err)
	}
	if _, err := ParseRIM([]byte("<x/>")); !errors.As(err, new(*check.ParseError)) {
		t.Errorf("rim: %v", err)
	}
	_ = hex.EncodeToString
}

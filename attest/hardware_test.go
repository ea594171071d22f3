package attest_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/attesttest"
	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/nvgpu"
	"github.com/sparkinfer/cc/policy"
)

// realBundle wraps real hardware evidence in a bundle: a real TDX quote with
// its collateral from a Polaris receipt and a real Blackwell GPU report with
// its chain. The statement is ours, so the quote's REPORTDATA cannot bind
// it and the GPU report's nonce cannot be its GPU nonce: exactly those two
// checks must fail, while every signature and chain check passes.
func realBundle(t *testing.T) (*attest.Bundle, time.Time) {
	t.Helper()
	raw := readReal(t, "polaris-0000-51467dd.json")
	var receipt struct {
		Attestation struct {
			Timestamp string `json:"timestamp_utc"`
		} `json:"attestation"`
		TDX struct {
			Quote      string `json:"quote_b64"`
			Collateral string `json:"collateral_b64"`
		} `json:"tdx"`
	}
	if err := json.Unmarshal(raw, &receipt); err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339, receipt.Attestation.Timestamp)
	if err != nil {
		t.Fatal(err)
	}
	quote, err := base64.StdEncoding.DecodeString(receipt.TDX.Quote)
	if err != nil {
		t.Fatal(err)
	}
	coll, err := base64.StdEncoding.DecodeString(receipt.TDX.Collateral)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := nvgpu.DecodeReportFile(readReal(t, "trustee-blackwellAttestationReport.txt"))
	if err != nil {
		t.Fatal(err)
	}
	chain := readReal(t, "trustee-blackwell_cert_chain_case1.txt")
	s := attesttest.Statement(at, testNonce)
	s.GPUEvidenceDigests = []string{attest.Digest(rep)}
	b := statementBundle(t, s, attest.TEEEvidence{Kind: attest.KindTDX, Quote: quote, Collateral: coll})
	b.GPUs = []attest.GPUEvidence{{Kind: attest.GPUKindNVIDIA, Report: rep, CertChain: chain}}
	return b, at
}

// readReal reads testdata/real/name.
func readReal(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/real/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// statementBundle is a bundle of s (marshalled) with the TEE evidence tee.
func statementBundle(t *testing.T, s attest.Statement, tee attest.TEEEvidence) *attest.Bundle {
	t.Helper()
	sb, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return &attest.Bundle{Version: attest.BundleVersion, Statement: sb, TEE: tee}
}

func TestRealHardwareEvidence(t *testing.T) {
	b, at := realBundle(t)
	if *update {
		enc, err := b.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("testdata/real-bundle.json", append(enc, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := verify(t, attesttest.PublicAuthority(), b, testNonce, at)
	var ve *check.VerifyError
	if !errors.As(err, &ve) || ve.Check != "tee.report_data" {
		t.Fatalf("Verify: %v, want the tee.report_data rejection first", err)
	}
	var failed []string
	for _, c := range r.Checks {
		if c.Status == check.Fail {
			failed = append(failed, c.Name)
		}
	}
	if want := []string{"tee.report_data", "gpu.0.nonce"}; !reflect.DeepEqual(failed, want) {
		t.Errorf("failed checks %v, want %v\n%s", failed, want, r.Checks)
	}
	for _, name := range []string{"tee.signature", "tdx.quote.signature", "tdx.pck.chain", "tdx.qe_report.signature", "tdx.tcb.level", "gpu.0.signature", "gpu.0.nvgpu.report.signature", "gpu.0.nvgpu.chain", "gpu.0.evidence_digest"} {
		if c, _ := r.Checks.Find(name); c.Status != check.Pass {
			t.Errorf("%s = %+v, want pass", name, c)
		}
	}
	c := r.Claims
	if c.Simulated || !c.TEE.SignatureVerified || c.TEE.ReportDataBound || !c.TEE.CollateralChecked || c.TEE.TCBStatus == "" || c.TEE.MRTD == "" {
		t.Errorf("tee claims %+v", c.TEE)
	}
	if g := c.GPUs[0]; g.Arch != "blackwell" || !g.SignatureVerified || g.NonceBound || !g.InStatement || g.DriverVersion != "595.58.03" {
		t.Errorf("gpu claims %+v", g)
	}
	t.Logf("real tdx quote (tcb %s) and blackwell report: %d checks, failed %v", c.TEE.TCBStatus, len(r.Checks), failed)

	// A flipped quote byte in the signed body is caught by the signature.
	bad := attesttest.FlipQuoteByte(b, 200)
	if _, err := verify(t, attesttest.PublicAuthority(), bad, testNonce, at); !errors.As(err, &ve) || ve.Check == "tee.report_data" {
		t.Errorf("flipped real quote: %v", err)
	}
}

// TestRealVTPMEvidence wraps a real Azure TDX CVM's evidence (TD quote, HCL
// report, vTPM quote) around our statement. The TD quote, the HCL binding
// and the vTPM quote signature verify; the vTPM quote's nonce is the
// capture's challenge, not our statement's report data, so exactly the
// nonce checks and the statement binding fail.
func TestRealVTPMEvidence(t *testing.T) {
	read := func(name string) []byte { return readReal(t, "az-tdx-vtpm/"+name) }
	b := statementBundle(t, attesttest.Statement(testNow, testNonce),
		attest.TEEEvidence{Kind: attest.KindTDXVTPM, Quote: read("td-quote.bin"), HCLReport: read("hcl-report.bin"), TPMQuote: read("quote.bin")})
	r, err := verify(t, attesttest.PublicAuthority(), b, testNonce)
	var ve *check.VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("Verify: %v, want a rejection\n%s", err, r.Checks)
	}
	var failed []string
	for _, c := range r.Checks {
		if c.Status == check.Fail {
			failed = append(failed, c.Name)
		}
	}
	t.Logf("checks:\n%s", r.Checks)
	for _, name := range []string{"tdx.quote.signature", "tdx.pck.chain", "tee.signature", "vtpm.hcl.report_data_binding", "vtpm.quote.signature", "tee.vtpm"} {
		if c, _ := r.Checks.Find(name); c.Status != check.Pass {
			t.Errorf("%s = %+v, want pass", name, c)
		}
	}
	for _, f := range failed {
		if f != "tee.report_data" && f != "vtpm.quote.nonce" && f != "vtpm.quote.go_attestation" {
			t.Errorf("unexpected failure %s", f)
		}
	}
	if c, _ := r.Checks.Find("tee.report_data"); c.Status != check.Fail {
		t.Errorf("tee.report_data = %+v, want fail", c)
	}
}

// TestRealSEVSNPEvidence wraps a real Milan SEV-SNP report and its VCEK
// around our statement: the signature and the chain to AMD's Milan root
// verify, the claims carry the product line and the decoded REPORTED_TCB
// (the one the VCEK certifies), and only the statement binding fails.
func TestRealSEVSNPEvidence(t *testing.T) {
	at := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC) // inside the VCEK's validity
	b := statementBundle(t, attesttest.Statement(at, testNonce),
		attest.TEEEvidence{Kind: attest.KindSEVSNP, Quote: readReal(t, "trustee-snp-report.bin"), Certificates: readReal(t, "trustee-snp-vcek.der")})
	r, err := verify(t, attesttest.PublicAuthority(), b, testNonce, at)
	var ve *check.VerifyError
	if !errors.As(err, &ve) || ve.Check != "tee.report_data" {
		t.Fatalf("Verify: %v, want the tee.report_data rejection\n%s", err, r.Checks)
	}
	for _, name := range []string{"tee.signature", "sevsnp.report.signature", "sevsnp.cert.chain", "sevsnp.tcb.cert_binding"} {
		if c, _ := r.Checks.Find(name); c.Status != check.Pass {
			t.Errorf("%s = %+v, want pass", name, c)
		}
	}
	c := r.Claims.TEE
	if c.SNPProduct != "Milan" || c.SNPReportedTCB == nil || c.CollateralChecked {
		t.Fatalf("tee claims %+v", c)
	}
	// The known answer, read off the raw report independently: REPORTED_TCB
	// is the little-endian u64 at 0x180; Milan's layout puts the
	// bootloader SPL in byte 0, the TEE in byte 1, SNP in byte 6 and
	// microcode in byte 7.
	raw := readReal(t, "trustee-snp-report.bin")
	want := attest.SNPTCB{BootLoader: raw[0x180], TEE: raw[0x181], SNP: raw[0x186], Microcode: raw[0x187]}
	if *c.SNPReportedTCB != want {
		t.Errorf("reported tcb %+v, want %+v", *c.SNPReportedTCB, want)
	}
	t.Logf("real sev-snp report: %s, reported tcb %s", c.SNPProduct, c.SNPReportedTCB)

	// A policy's minimum appraises it: met at the reported TCB, not one
	// microcode level above.
	for _, tc := range []struct {
		min  attest.SNPTCB
		want check.Status
	}{{want, check.Pass}, {attest.SNPTCB{BootLoader: want.BootLoader, TEE: want.TEE, SNP: want.SNP, Microcode: want.Microcode + 1}, check.Fail}} {
		p := &policy.Policy{Version: policy.Version, SNPMinTCB: map[string]attest.SNPTCB{"Milan": tc.min}}
		if ch, _ := policy.Evaluate(&r.Claims, p).Checks.Find("policy.tee.tcb_status"); ch.Status != tc.want {
			t.Errorf("minimum %s: policy.tee.tcb_status %+v, want %s", tc.min, ch, tc.want)
		}
	}
}

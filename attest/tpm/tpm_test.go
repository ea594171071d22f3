package tpm

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/tdx"
)

var challenge = []byte("challenge")

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tdReportData is REPORTDATA of the real TD quote (64 bytes at offset 568 of
// a v4 quote). attest/tdx verifies that quote; here it stands for the
// verified value.
func tdReportData(t testing.TB) []byte {
	t.Helper()
	q := read(t, "td-quote.bin")
	return bytes.Clone(q[568 : 568+64])
}

func parseAll(t testing.TB) (*HCLReport, *Quote) {
	t.Helper()
	h, err := ParseHCLReport(read(t, "hcl-report.bin"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParseTPMQuote(read(t, "quote.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return h, q
}

func TestHCLReportLayout(t *testing.T) {
	h, _ := parseAll(t)
	if h.HardwareType != "tdx" || h.HashType != "sha256" || h.Version != 2 {
		t.Errorf("type/hash/version = %s/%s/%d", h.HardwareType, h.HashType, h.Version)
	}
	// The variable data derived from the header fields is the runtime-claims
	// JSON at bytes 1236..2436 (inclusive) of the file.
	raw := read(t, "hcl-report.bin")
	if !bytes.Equal(h.VariableData(), raw[1236:2437]) || !bytes.HasPrefix(h.VariableData(), []byte(`{"keys":`)) {
		t.Errorf("variable data is not bytes 1236..2436")
	}
	if len(h.HardwareReport()) != 1024 {
		t.Errorf("td report is %d bytes", len(h.HardwareReport()))
	}
	if h.AttestationKey().N.BitLen() != 2048 || h.AttestationKey().E != 65537 {
		t.Errorf("ak %d bits, e %d", h.AttestationKey().N.BitLen(), h.AttestationKey().E)
	}
	// The TD quote's REPORTDATA binds it.
	sum := sha256.Sum256(h.VariableData())
	if !bytes.Equal(tdReportData(t)[:32], sum[:]) {
		t.Fatal("td quote reportdata[0:32] is not sha256(variable data)")
	}
}

func TestVerifyRealEvidence(t *testing.T) {
	h, q := parseAll(t)
	c, err := Verify(h, q, tdReportData(t), challenge)
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, c.Checks)
	}
	t.Logf("checks:\n%s", c.Checks)
	for _, name := range []string{CheckReportDataBinding, CheckHWReportData, CheckQuoteSignature, CheckQuoteNonce, CheckQuotePCRDigest, CheckQuoteLibrary} {
		if got, ok := c.Checks.Find(name); !ok || got.Status != check.Pass {
			t.Errorf("check %s = %+v, want pass", name, got)
		}
	}
	if len(c.Checks) != 6 {
		t.Errorf("%d checks ran, want 6", len(c.Checks))
	}
	if c.Platform != "tdx-vtpm" || c.Nonce != "6368616c6c656e6765" || c.AKBits != 2048 || len(c.AKFingerprint) != 64 {
		t.Errorf("claims %+v", c)
	}
	if len(c.PCRs) != 24 || c.PCRs[0].Index != 0 || c.PCRs[0].Digest != "782b20b10f55cc46e2142cc2145d548698073e5beb82752c8d7f9279f0d8a273" || c.PCRs[23].Index != 23 {
		t.Errorf("pcrs %+v", c.PCRs)
	}
	if c.HardwareReport.Type != "tdx" || c.RuntimeData.HashType != "sha256" {
		t.Errorf("hardware %+v runtime %+v", c.HardwareReport, c.RuntimeData)
	}
	var vm map[string]any
	if err := json.Unmarshal(c.RuntimeData.VMConfiguration, &vm); err != nil || vm["secure-boot"] != true {
		t.Errorf("vm configuration %s (%v)", c.RuntimeData.VMConfiguration, err)
	}
	if _, err := json.Marshal(c); err != nil {
		t.Fatal(err)
	}
}

func TestEvidenceJSONMatchesFiles(t *testing.T) {
	ev, err := ParseEvidenceJSON(read(t, "evidence-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	_, q := parseAll(t)
	if !bytes.Equal(ev.HCLReport, read(t, "hcl-report.bin")) || !bytes.Equal(ev.TDQuote, read(t, "td-quote.bin")) {
		t.Error("evidence json's hcl report or td quote differs from the files")
	}
	if !bytes.Equal(ev.Quote.Message, q.Message) || !bytes.Equal(ev.Quote.Signature, q.Signature) || len(ev.Quote.PCRs) != len(q.PCRs) {
		t.Error("evidence json's quote differs from quote.bin")
	}
	h, err := ParseHCLReport(ev.HCLReport)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(h, ev.Quote, ev.TDQuote[568:632], challenge); err != nil {
		t.Fatalf("evidence json does not verify: %v", err)
	}
}

func wantVerifyFail(t *testing.T, err error, check string) {
	t.Helper()
	var ve *check_VerifyError
	if !errors.As(err, &ve) || ve.Check != check {
		t.Fatalf("err = %v, want a verify error from %s", err, check)
	}
}

type check_VerifyError = check.VerifyError

func TestWrongNonceRejected(t *testing.T) {
	h, q := parseAll(t)
	for _, n := range [][]byte{[]byte("challengf"), []byte("challenge "), []byte("Challenge")} {
		c, err := Verify(h, q, tdReportData(t), n)
		wantVerifyFail(t, err, CheckQuoteNonce)
		if got, _ := c.Checks.Find(CheckQuoteSignature); got.Status != check.Pass {
			t.Errorf("signature %+v, want pass: only the nonce is wrong", got)
		}
	}
	if _, err := Verify(h, q, tdReportData(t), nil); !errors.As(err, new(*check.ParseError)) {
		t.Fatalf("empty nonce: err = %v, want a parse error", err)
	}
}

func TestTamperedRuntimeClaimsBreakBinding(t *testing.T) {
	raw := read(t, "hcl-report.bin")
	// Change one character of the user-data claim (inside the JSON string,
	// so the JSON still parses).
	i := bytes.Index(raw, []byte(`"user-data":"0`))
	if i < 0 {
		t.Fatal("user-data not found")
	}
	raw[i+len(`"user-data":"`)] = '1'
	h, err := ParseHCLReport(raw)
	if err != nil {
		t.Fatal(err)
	}
	_, q := parseAll(t)
	_, err = Verify(h, q, tdReportData(t), challenge)
	wantVerifyFail(t, err, CheckReportDataBinding)
	// A different (but verified) REPORTDATA does not bind this report either.
	rd := tdReportData(t)
	rd[0] ^= 1
	h, _ = parseAll(t)
	_, err = Verify(h, q, rd, challenge)
	wantVerifyFail(t, err, CheckReportDataBinding)
}

func TestTamperedQuoteRejected(t *testing.T) {
	h, q := parseAll(t)
	q.Signature[10] ^= 0x40
	_, err := Verify(h, q, tdReportData(t), challenge)
	wantVerifyFail(t, err, CheckQuoteSignature)

	h, q = parseAll(t)
	q.PCRs[7][0] ^= 1
	_, err = Verify(h, q, tdReportData(t), challenge)
	wantVerifyFail(t, err, CheckQuotePCRDigest)

	// A key swapped into the runtime claims: the binding breaks first, and
	// the quote's signature no longer verifies with it.
	h, q = parseAll(t)
	other, _ := parseAll(t)
	other.ak.N.SetBit(other.ak.N, 5, 1-other.ak.N.Bit(5))
	c, err := Verify(other, q, tdReportData(t), challenge)
	if err == nil {
		t.Fatal("verified with a different key")
	}
	if got, _ := c.Checks.Find(CheckQuoteSignature); got.Status != check.Fail {
		t.Errorf("signature with a swapped key %+v, want fail", got)
	}
	_ = h
}

func TestParseErrors(t *testing.T) {
	hcl := read(t, "hcl-report.bin")
	qb := read(t, "quote.bin")
	mut := func(b []byte, f func([]byte)) []byte { c := bytes.Clone(b); f(c); return c }
	for name, b := range map[string][]byte{
		"empty":                nil,
		"truncated":            hcl[:1235],
		"bad signature":        mut(hcl, func(b []byte) { b[0] = 'X' }),
		"report size":          mut(hcl, func(b []byte) { b[8]++ }),
		"status":               mut(hcl, func(b []byte) { b[16] = 1 }),
		"reserved":             mut(hcl, func(b []byte) { b[24] = 1 }),
		"td padding":           mut(hcl, func(b []byte) { b[0x20+1024+5] = 1 }),
		"report type":          mut(hcl, func(b []byte) { b[0x4C0+8] = 3 }),
		"hash type":            mut(hcl, func(b []byte) { b[0x4C0+12] = 9 }),
		"var size":             mut(hcl, func(b []byte) { b[0x4C0+16]++ }),
		"trailing":             mut(hcl, func(b []byte) { b[len(b)-1] = 1 }),
		"json":                 mut(hcl, func(b []byte) { b[0x4D4] = '[' }),
		"no ak":                bytes.Replace(hcl, []byte("HCLAkPub"), []byte("HCLAkPuc"), 1),
		"var data size > file": mut(hcl, func(b []byte) { b[0x4C0+18] = 0x10 }),
	} {
		if _, err := ParseHCLReport(b); !errors.As(err, new(*check.ParseError)) {
			t.Errorf("hcl %s: err = %v, want a parse error", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":       nil,
		"truncated":   qb[:len(qb)-1],
		"trailing":    append(bytes.Clone(qb), 0),
		"sig length":  mut(qb, func(b []byte) { b[1] = 2 }),
		"huge length": mut(qb, func(b []byte) { b[7] = 0xff }),
		"pcr count":   mut(qb, func(b []byte) { b[0x18a] = 23 }),
		"magic":       mut(qb, func(b []byte) { b[0x110] = 0 }),
		"not a quote": mut(qb, func(b []byte) { b[0x115] = 0x17 }),
		"wrong bank":  mut(qb, func(b []byte) { b[0x15f] = 0x0c }),
	} {
		if _, err := ParseTPMQuote(b); !errors.As(err, new(*check.ParseError)) {
			t.Errorf("quote %s: err = %v, want a parse error", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"not json":      []byte("{"),
		"unknown field": []byte(`{"version":1,"extra":1}`),
		"version 2":     bytes.Replace(read(t, "evidence-v1.json"), []byte(`"version": 1`), []byte(`"version": 2`), 1),
	} {
		if _, err := ParseEvidenceJSON(b); !errors.As(err, new(*check.ParseError)) {
			t.Errorf("evidence %s: err = %v, want a parse error", name, err)
		}
	}
	h, q := parseAll(t)
	if _, err := Verify(h, q, make([]byte, 32), challenge); !errors.As(err, new(*check.ParseError)) {
		t.Errorf("short reportdata: err = %v", err)
	}
}

func TestVerifyAzureTDX(t *testing.T) {
	ev, err := ParseEvidenceJSON(read(t, "evidence-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	// No collateral for this TD quote: its signature, QE report and PCK chain
	// verify, collateral checks are skipped, and the vTPM chain verifies.
	res, err := VerifyAzureTDX(ev, challenge, tdx.Options{AsOf: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)})
	if !errors.As(err, new(*check.UnavailableError)) {
		t.Fatalf("err = %v, want unavailable (no collateral)", err)
	}
	for _, name := range []string{"tdx.quote.signature", "tdx.qe_report.signature", "tdx.pck.chain"} {
		if got, _ := res.TD.Checks.Find(name); got.Status != check.Pass {
			t.Errorf("td check %s = %+v", name, got)
		}
	}
	if res.VTPM == nil || res.VTPM.Checks.Failed() || len(res.VTPM.Checks) != 6 {
		t.Fatalf("vtpm checks: %v", res.VTPM)
	}
	t.Logf("td checks:\n%svtpm checks:\n%s", res.TD.Checks, res.VTPM.Checks)

	// Wrong nonce: rejected by the vTPM part.
	if _, err := VerifyAzureTDX(ev, []byte("other"), tdx.Options{AsOf: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)}); !errors.As(err, new(*check.VerifyError)) {
		t.Fatalf("wrong nonce: err = %v", err)
	}
	// A tampered TD quote body: rejected by attest/tdx before any binding.
	bad := *ev
	bad.TDQuote = bytes.Clone(ev.TDQuote)
	bad.TDQuote[600] ^= 1 // inside REPORTDATA
	res, err = VerifyAzureTDX(&bad, challenge, tdx.Options{AsOf: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)})
	var ve *check.VerifyError
	if !errors.As(err, &ve) || res.VTPM != nil {
		t.Fatalf("tampered td quote: err = %v, vtpm %v", err, res.VTPM)
	}
}

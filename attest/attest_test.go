package attest_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/attesttest"
	"github.com/sparkinfer/cc/attest/check"
)

var update = flag.Bool("update", false, "rewrite golden files")

var (
	testNow   = time.Date(2026, 7, 10, 1, 47, 29, 0, time.UTC)
	testNonce = []byte("0123456789abcdef0123456789abcdef")
)

// Known answers computed independently with Python's hashlib from
// testdata/statement-v1.json (see testdata/README.md).
const (
	katReportData = "86b30579172231b4f20f06b702afd316e3ca9db7c92480ea26d584b663c619c152ee78fd9861a73509a9a36abf819d68ba3ab329cf1a62ae08f0029ffd46d1fb"
	katGPUNonce   = "1ab88db8cd24a723ff0aafa88a4a32a572c4715d959f4f0059605726931fdf41"
)

func TestStatementKnownAnswers(t *testing.T) {
	b, err := os.ReadFile("testdata/statement-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	rd := attest.ReportData(b)
	if got := hex.EncodeToString(rd[:]); got != katReportData {
		t.Errorf("ReportData = %s, want %s", got, katReportData)
	}
	s, err := attest.ParseStatement(b)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.GPUNonce()
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(n[:]); got != katGPUNonce {
		t.Errorf("GPUNonce = %s, want %s", got, katGPUNonce)
	}
	again, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Errorf("Marshal(ParseStatement(b)) differs from b:\n%s\n%s", again, b)
	}
	// The constructor is deterministic.
	s2 := attesttest.Statement(testNow, testNonce)
	s2.GPUEvidenceDigests = []string{strings.Repeat("1", 64)}
	b2, err := s2.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b2, b) {
		t.Errorf("constructor output differs from the known statement")
	}
}

func TestParseStatementRejects(t *testing.T) {
	good, err := os.ReadFile("testdata/statement-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	s := string(good)
	cases := map[string]string{
		"trailing newline":  s + "\n",
		"trailing data":     s + "{}",
		"leading space":     " " + s,
		"space after colon": strings.Replace(s, `"version":`, `"version": `, 1),
		"unknown field":     strings.Replace(s, `{"version"`, `{"extra":1,"version"`, 1),
		"duplicate key":     strings.Replace(s, `,"license_id"`, `,"license_id":"x","license_id"`, 1),
		"missing field":     strings.Replace(s, `,"license_id":"test-license"`, ``, 1),
		"reordered":         strings.Replace(strings.Replace(s, `"license_id":"test-license",`, ``, 1), `"nonce":`, `"license_id":"test-license","nonce":`, 1),
		"uppercase hex":     strings.Replace(s, `"source_hash":"9548ef`, `"source_hash":"9548EF`, 1),
		"short digest":      strings.Replace(s, `"source_hash":"9548ef`, `"source_hash":"9548e`, 1),
		"wrong version":     strings.Replace(s, `statement/v1`, `statement/v2`, 1),
		"bad time":          strings.Replace(s, `01:47:29Z`, `01:47:29+00:00`, 1),
		"wrong type":        strings.Replace(s, `"key_id":1`, `"key_id":"1"`, 1),
		"not json":          "garbage",
		"empty":             "",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := attest.ParseStatement([]byte(in))
			var pe *check.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParseStatement: %v, want *check.ParseError", err)
			}
		})
	}
}

func mint(t *testing.T, a *attesttest.Authority, spec attesttest.Spec) *attest.Bundle {
	t.Helper()
	if spec.Statement.Version == "" {
		spec.Statement = attesttest.Statement(testNow, testNonce)
	}
	b, err := a.Mint(spec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func verify(t *testing.T, a *attesttest.Authority, b *attest.Bundle, nonce []byte, at ...time.Time) (*attest.Result, error) {
	t.Helper()
	now := testNow
	if len(at) > 0 {
		now = at[0]
	}
	v, err := attest.NewVerifier(a.Options(now))
	if err != nil {
		t.Fatal(err)
	}
	// Round trip through the wire format, as a client would.
	enc, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	dec, err := attest.ParseBundle(enc)
	if err != nil {
		t.Fatal(err)
	}
	return v.Verify(context.Background(), dec, attest.Expectations{Nonce: nonce})
}

func TestVerifySimBundle(t *testing.T) {
	a, err := attesttest.NewAuthority(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := mint(t, a, attesttest.Spec{GPUs: 2})
	r, err := verify(t, a, b, testNonce)
	if err != nil {
		t.Fatalf("Verify: %v\n%s", err, r.Checks)
	}
	c := r.Claims
	if !c.Simulated || !c.TEE.Simulated || !c.TEE.ReportDataBound || !c.NonceChecked || len(c.GPUs) != 2 {
		t.Fatalf("claims: %+v", c)
	}
	for _, g := range c.GPUs {
		if !g.Simulated || !g.NonceBound || !g.InStatement || !g.SignatureVerified || !g.CCEnabled || g.DevToolsEnabled {
			t.Errorf("gpu claims: %+v", g)
		}
	}
	if ch, ok := r.Checks.Find("simulated"); !ok || !strings.Contains(ch.Reason, "SIMULATED") {
		t.Errorf("no SIMULATED check line: %s", r.Checks)
	}
	if r.Checks.Failed() {
		t.Errorf("failed checks:\n%s", r.Checks)
	}
	// Without an expected nonce freshness is skipped, not passed.
	r, err = verify(t, a, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ch, _ := r.Checks.Find("statement.nonce"); ch.Status != check.Skipped || r.Claims.NonceChecked {
		t.Errorf("statement.nonce = %+v, NonceChecked %v", ch, r.Claims.NonceChecked)
	}
}

// TestVerifyRejects breaks one binding or signature at a time and expects
// exactly the named check to fail, with a *check.VerifyError.
func TestVerifyRejects(t *testing.T) {
	a, err := attesttest.NewAuthority(nil)
	if err != nil {
		t.Fatal(err)
	}
	good := mint(t, a, attesttest.Spec{GPUs: 2})
	other := mint(t, a, attesttest.Spec{GPUs: 2, Statement: func() attest.Statement {
		s := attesttest.Statement(testNow, testNonce)
		s.BootNonce = strings.Repeat("ab", 32)
		return s
	}()})
	stranger, err := attesttest.NewAuthority(nil)
	if err != nil {
		t.Fatal(err)
	}
	tampered, err := attesttest.TamperStatement(good)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		b     *attest.Bundle
		nonce []byte
		check string
	}{
		{"statement byte", tampered, testNonce, "tee.report_data"},
		{"quote mrtd byte", attesttest.FlipQuoteByte(good, 20), testNonce, "tee.signature"},
		{"quote report data byte", attesttest.FlipQuoteByte(good, 300), testNonce, "tee.signature"},
		{"quote signature byte", attesttest.FlipQuoteByte(good, 350), testNonce, "tee.signature"},
		{"gpu report byte", attesttest.FlipGPUReportByte(good, 1, 100), testNonce, "gpu.1.signature"},
		{"gpu report nonce byte", attesttest.FlipGPUReportByte(good, 0, 20), testNonce, "gpu.0.signature"},
		{"gpu nonce from another boot", mint(t, a, attesttest.Spec{GPUs: 2, WrongGPUNonce: true}), testNonce, "gpu.0.nonce"},
		{"gpu evidence swapped from another boot", attesttest.SwapGPUs(good, other), testNonce, "gpu.0.evidence_digest"},
		{"gpu digest not in statement", mint(t, a, attesttest.Spec{GPUs: 2, WrongGPUDigest: true}), testNonce, "gpu.0.evidence_digest"},
		{"gpu dropped", func() *attest.Bundle { c := attesttest.Clone(good); c.GPUs = c.GPUs[:1]; return c }(), testNonce, "gpu.count"},
		{"report data of other bytes", mint(t, a, attesttest.Spec{GPUs: 1, WrongReportData: true}), testNonce, "tee.report_data"},
		{"client nonce swapped", good, []byte("another nonce, 32 bytes long...."), "statement.nonce"},
		{"signed by another root", mint(t, stranger, attesttest.Spec{GPUs: 1}), testNonce, "tee.signature"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := verify(t, a, tc.b, tc.nonce)
			var ve *check.VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify: %v, want *check.VerifyError", err)
			}
			ch, ok := r.Checks.Find(tc.check)
			if !ok || ch.Status != check.Fail {
				t.Fatalf("check %s = %+v, want fail; checks:\n%s", tc.check, ch, r.Checks)
			}
			if tc.name == "gpu digest not in statement" && !strings.Contains(ch.Reason, "gpu evidence digest not in statement") {
				t.Errorf("reason %q", ch.Reason)
			}
		})
	}
	// Sanity: the good bundle passes with the same verifier.
	if _, err := verify(t, a, good, testNonce); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyEveryQuoteByte flips every byte of the sim quote and of a GPU
// report: each copy must be rejected as failing verification.
func TestVerifyEveryByte(t *testing.T) {
	a := attesttest.PublicAuthority()
	good := mint(t, a, attesttest.Spec{GPUs: 1})
	var rejected, unusable int
	classify := func(b *attest.Bundle) {
		_, err := verify(t, a, b, testNonce)
		var ve *check.VerifyError
		var pe *check.ParseError
		switch {
		case errors.As(err, &ve):
			rejected++
		case errors.As(err, &pe):
			unusable++ // magic, version or flags no longer parse
		default:
			t.Fatalf("flipped byte accepted (err %v)", err)
		}
	}
	for i := range good.TEE.Quote {
		classify(attesttest.FlipQuoteByte(good, i))
	}
	for i := range good.GPUs[0].Report {
		classify(attesttest.FlipGPUReportByte(good, 0, i))
	}
	t.Logf("flipped %d quote and %d gpu report bytes: %d rejected, %d unusable, 0 accepted", len(good.TEE.Quote), len(good.GPUs[0].Report), rejected, unusable)
	if rejected < len(good.TEE.Quote) {
		t.Errorf("only %d flips rejected as failing verification", rejected)
	}
}

func TestGoldenSimBundle(t *testing.T) {
	a := attesttest.PublicAuthority()
	b := mint(t, a, attesttest.Spec{GPUs: 2})
	enc, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "sim-bundle.json")
	if *update {
		if err := os.WriteFile(golden, append(enc, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(enc, '\n'), want) {
		t.Errorf("minted bundle differs from %s (run with -update if the format changed on purpose)", golden)
	}
	// The golden file verifies under the public simulation root.
	dec, err := attest.ParseBundle(want)
	if err != nil {
		t.Fatal(err)
	}
	r, err := attest.Verify(context.Background(), dec, attest.Options{Now: func() time.Time { return testNow }}, attest.Expectations{Nonce: testNonce})
	if err != nil {
		t.Fatalf("%v\n%s", err, r.Checks)
	}
}

func TestParseBundleRejects(t *testing.T) {
	good, err := os.ReadFile("testdata/sim-bundle.json")
	if err != nil {
		t.Fatal(err)
	}
	s := string(good)
	cases := map[string]string{
		"unknown field": strings.Replace(s, `"version"`, `"extra": 1, "version"`, 1),
		"trailing data": s + "{}",
		"wrong version": strings.Replace(s, "evidence/v1", "evidence/v9", 1),
		"unknown kind":  strings.Replace(s, `"kind": "sim"`, `"kind": "sgx"`, 1),
		"bad base64":    strings.Replace(s, `"statement": "`, `"statement": "!`, 1),
		"wrong type":    strings.Replace(s, `"gpus": [`, `"gpus": {"a":[`, 1),
		"truncated":     s[:len(s)/2],
		"empty":         "",
		"null":          "null",
		"too many gpus": strings.Replace(s, `"gpus": [`, `"gpus": [`+strings.Repeat(`{"kind":"sim","report":"AA=="},`, attest.MaxGPUs), 1),
		"missing quote": strings.Replace(s, `"quote":`, `"event_log":`, 1),
		"vtpm on sim":   strings.Replace(s, `"quote":`, `"hcl_report": "AA==", "quote":`, 1),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := attest.ParseBundle([]byte(in))
			var pe *check.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParseBundle: %v, want *check.ParseError", err)
			}
		})
	}
	big := bytes.Repeat([]byte(" "), attest.MaxBundleSize+1)
	if _, err := attest.DecodeBundle(bytes.NewReader(big)); err == nil {
		t.Error("oversize bundle accepted")
	}
}

func FuzzDecodeBundle(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*.json")
	if err != nil {
		f.Fatal(err)
	}
	n := 0
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if bytes.Contains(b, []byte(attest.BundleVersion)) {
			f.Add(b)
			n++
		}
	}
	if n == 0 {
		f.Fatal("no bundle seeds in testdata")
	}
	a := attesttest.PublicAuthority()
	v, err := attest.NewVerifier(a.Options(testNow))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := attest.DecodeBundle(bytes.NewReader(data))
		if err != nil {
			var pe *check.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("DecodeBundle error %T %v, want *check.ParseError", err, err)
			}
			return
		}
		r, err := v.Verify(context.Background(), b, attest.Expectations{Nonce: testNonce})
		if err == nil && (r == nil || r.Checks.Failed()) {
			t.Fatalf("nil error with failed checks")
		}
		if _, err := b.Encode(); err != nil {
			t.Fatalf("decoded bundle does not re-encode: %v", err)
		}
	})
}

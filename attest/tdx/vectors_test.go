package tdx

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest/check"
)

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fileCollateral(t testing.TB, p string) *Collateral {
	t.Helper()
	c, err := ParseCollateral(readFile(t, p))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return c
}

// statuses maps check name to status for compact assertions.
func statuses(l check.List) map[string]check.Status {
	m := map[string]check.Status{}
	for _, c := range l {
		m[c.Name] = c.Status
	}
	return m
}

func wantStatuses(t *testing.T, l check.List, want map[string]check.Status) {
	t.Helper()
	got := statuses(l)
	for n, s := range want {
		if got[n] != s {
			t.Errorf("check %s: %s, want %s", n, got[n], s)
		}
	}
	if t.Failed() {
		t.Logf("\n%s", l)
	}
}

// The trustee quotes were captured 2025-10/11 with collateral issued
// 2025-10-27/28; verify as of a time inside that collateral's window.
var trusteeAsOf = time.Date(2025, 11, 1, 0, 0, 0, 0, time.UTC)

func TestTrusteeQuotes(t *testing.T) {
	coll := fileCollateral(t, "testdata/trustee/collateral.json")
	for _, tc := range []struct {
		file     string
		version  int
		bodyType int
	}{
		{"testdata/trustee/trustee-tdx_quote_4.dat", 4, BodyTypeTDX10},
		{"testdata/trustee/trustee-tdx_quote_5.dat", 5, BodyTypeTDX15},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cl, err := Verify(readFile(t, tc.file), Options{AsOf: trusteeAsOf, Collateral: coll})
			if cl == nil {
				t.Fatalf("verify: %v", err)
			}
			t.Logf("result: %v\n%s", err, cl.Checks)
			if cl.QuoteVersion != tc.version || cl.BodyType != tc.bodyType {
				t.Errorf("version %d body %d", cl.QuoteVersion, cl.BodyType)
			}
			if tc.version == 5 && (len(cl.TeeTCBSVN2) != 32 || len(cl.MRServiceTD) != 96) {
				t.Errorf("v5 claims: tee_tcb_svn2 %q mr_service_td %q", cl.TeeTCBSVN2, cl.MRServiceTD)
			}
			wantStatuses(t, cl.Checks, trusteeWant[tc.version])
			var ve *check.VerifyError
			if trusteeWantErr && !errors.As(err, &ve) {
				t.Errorf("want a VerifyError, got %v", err)
			}
		})
	}
}

// trusteeWant records exactly what verifies for the trustee quotes with the
// trustee collateral. The quote's signature, QE report and PCK chain verify;
// the recorded TCB info and QE identity verify under the Intel SGX TCB
// Signing chain, and the QE identity matches; but the TCB info is for FMSPC
// 00A06D080000 while the quotes' PCK certificates say 50806f000000 (v4) and
// 90c06f000000 (v5), so platform and TCB level fail. No CRLs were recorded.
// The v4 quote comes from a debug TD (TD_ATTRIBUTES bit 0 set): rejected.
var trusteeWant = map[int]map[string]check.Status{
	4: {
		CheckStructure: check.Pass, CheckPCKChain: check.Pass, CheckQuoteSignature: check.Pass,
		CheckQEReportSig: check.Pass, CheckQEReportBinding: check.Pass, CheckCollateral: check.Pass,
		CheckRootCRL: check.Skipped, CheckPCKCRL: check.Skipped,
		CheckTCBInfoSignature: check.Pass, CheckTCBInfoPlatform: check.Fail, CheckTDXModule: check.Pass,
		CheckTCBLevel: check.Fail, CheckQEIdentitySig: check.Pass, CheckQEIdentity: check.Pass,
		CheckLibrary: check.Pass, CheckDebug: check.Fail, CheckReportData: check.Skipped,
	},
	5: {
		CheckStructure: check.Pass, CheckPCKChain: check.Pass, CheckQuoteSignature: check.Pass,
		CheckQEReportSig: check.Pass, CheckQEReportBinding: check.Pass, CheckCollateral: check.Pass,
		CheckRootCRL: check.Skipped, CheckPCKCRL: check.Skipped,
		CheckTCBInfoSignature: check.Pass, CheckTCBInfoPlatform: check.Fail, CheckTDXModule: check.Pass,
		CheckTCBLevel: check.Fail, CheckQEIdentitySig: check.Pass, CheckQEIdentity: check.Pass,
		CheckLibrary: check.Skipped, CheckDebug: check.Pass, CheckReportData: check.Skipped,
	},
}

var trusteeWantErr = true

// go-tdx-guest's own test quote carries a test marker after the quote
// ("\nextra bytes(only for testing purpose)\n"), which we reject; the quote
// itself (its declared length) verifies, and its recorded collateral has no
// TCB level for it.
func TestGoTDXGuestQuote(t *testing.T) {
	raw := readFile(t, "testdata/gotdxguest/tdx_prod_quote_SPR_E4.dat")
	_, err := ParseQuote(raw)
	var pe *check.ParseError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "after the end of the signature data") {
		t.Fatalf("quote with trailing text: got %v, want a ParseError about trailing bytes", err)
	}
	marker := []byte("\nextra bytes(only for testing purpose)\n")
	if !bytes.HasSuffix(raw, marker) {
		t.Fatal("test marker not found")
	}
	quote := raw[:len(raw)-len(marker)]
	coll := fileCollateral(t, "testdata/gotdxguest/collateral.json")
	cl, err := Verify(quote, Options{AsOf: time.Date(2023, 7, 1, 1, 0, 0, 0, time.UTC), Collateral: coll})
	if cl == nil {
		t.Fatalf("verify: %v", err)
	}
	t.Logf("result: %v\n%s", err, cl.Checks)
	wantStatuses(t, cl.Checks, map[string]check.Status{
		CheckStructure: check.Pass, CheckPCKChain: check.Pass, CheckQuoteSignature: check.Pass,
		CheckQEReportSig: check.Pass, CheckQEReportBinding: check.Pass,
		CheckTCBLevel: check.Fail,
	})
	var ve *check.VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want a VerifyError", err)
	}
	c, _ := cl.Checks.Find(CheckTCBLevel)
	if !strings.HasPrefix(c.Reason, "no matching TCB level") {
		t.Errorf("tcb level reason %q, want it to start with \"no matching TCB level\"", c.Reason)
	}
}

func TestEmbeddedRootMatchesQuotes(t *testing.T) {
	files := []string{"testdata/trustee/trustee-tdx_quote_4.dat", "testdata/trustee/trustee-tdx_quote_5.dat"}
	var quotes [][]byte
	for _, f := range files {
		quotes = append(quotes, readFile(t, f))
	}
	for _, r := range loadReceipts(t) {
		quotes = append(quotes, r.quote(t))
	}
	for i, raw := range quotes {
		q, err := ParseQuote(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(q.PCKChain[2].Raw, IntelRootCA().Raw) {
			t.Errorf("quote %d: chain root differs from the embedded root", i)
		}
	}
}

func TestNoCollateralIsUnavailable(t *testing.T) {
	r := loadReceipts(t)[0]
	cl, err := Verify(r.quote(t), Options{AsOf: r.asOf(t)})
	var ue *check.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v, want UnavailableError", err)
	}
	wantStatuses(t, cl.Checks, map[string]check.Status{CheckQuoteSignature: check.Pass, CheckTCBLevel: check.Skipped, CheckLibrary: check.Pass})
}

func TestExpiredCollateralRejected(t *testing.T) {
	r := loadReceipts(t)[0]
	cl, err := Verify(r.quote(t), Options{AsOf: r.asOf(t).AddDate(0, 2, 0), Collateral: r.collateral(t)})
	var ve *check.VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want VerifyError", err)
	}
	wantStatuses(t, cl.Checks, map[string]check.Status{CheckCollateral: check.Fail, CheckQuoteSignature: check.Pass})
}

func TestWrongReportDataRejected(t *testing.T) {
	r := loadReceipts(t)[0]
	want := r.wantReportData()
	want[0] ^= 1
	cl, err := Verify(r.quote(t), Options{AsOf: r.asOf(t), Collateral: r.collateral(t), ReportData: want})
	var ve *check.VerifyError
	if !errors.As(err, &ve) || ve.Check != CheckReportData {
		t.Fatalf("got %v, want VerifyError for %s", err, CheckReportData)
	}
	_ = cl
}

func TestCollateralFileRoundTrip(t *testing.T) {
	r := loadReceipts(t)[0]
	c := r.collateral(t)
	b, err := jsonMarshal(c.File())
	if err != nil {
		t.Fatal(err)
	}
	c2, err := ParseCollateral(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(r.quote(t), Options{AsOf: r.asOf(t), Collateral: c2}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{"format":"x"}`, `{"format":"sparkinfer-tdx-collateral-v1","tcb_info":"", "extra":1}`, `[]`, `not json`, `{"v":2,"items":{},"urls":[]}`} {
		var pe *check.ParseError
		if _, err := ParseCollateral([]byte(bad)); !errors.As(err, &pe) {
			t.Errorf("%q: got %v, want ParseError", bad, err)
		}
	}
}

package tdx

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest/check"
)

type realQuote struct {
	name string
	raw  []byte
	opts Options
}

// realQuotes returns every real quote in testdata with the options it is
// verified under: Polaris quotes with their collateral (they fully pass),
// trustee and go-tdx-guest quotes without collateral (their recorded
// collateral does not match them).
func realQuotes(t testing.TB) []realQuote {
	var out []realQuote
	for _, r := range loadReceipts(t) {
		out = append(out, realQuote{"polaris/" + r.name, r.quote(t), Options{AsOf: r.asOf(t), Collateral: r.collateral(t), ReportData: r.wantReportData()}})
	}
	for _, f := range []string{"trustee-tdx_quote_4.dat", "trustee-tdx_quote_5.dat"} {
		out = append(out, realQuote{"trustee/" + f, readFile(t, "testdata/trustee/"+f), Options{AsOf: trusteeAsOf}})
	}
	raw := readFile(t, "testdata/gotdxguest/tdx_prod_quote_SPR_E4.dat")
	raw = raw[:len(raw)-len("\nextra bytes(only for testing purpose)\n")]
	out = append(out, realQuote{"gotdxguest/tdx_prod_quote_SPR_E4.dat", raw, Options{AsOf: time.Date(2023, 7, 1, 1, 0, 0, 0, time.UTC)}})
	return out
}

type region struct {
	name       string
	start, end int
	n          int // positions to sample
}

// regions splits a parsed quote into the parts the mutation test covers.
func regions(q *Quote) []region {
	sd := q.SignedLength + 4
	cert := sd + sigDataCert
	auth := cert + qeCertAuthLen
	chainHdr := cert + qeCertAuthData + len(q.QEAuthData)
	end := len(q.Raw) - q.Padding
	rs := []region{
		{"header", 0, headerSize, 12},
		{"body", headerSize, q.SignedLength, 48},
		{"signature data length", q.SignedLength, sd, 4},
		{"quote signature", sd, sd + sigDataAttestKey, 12},
		{"attestation key", sd + sigDataAttestKey, sd + sigDataCertType, 12},
		{"certification data type and size", sd + sigDataCertType, cert, 6},
		{"qe report", cert, cert + qeReportSize, 36},
		{"qe report signature", cert + qeReportSize, auth, 12},
		{"qe auth data", auth, chainHdr, 10},
		{"pck chain type and size", chainHdr, chainHdr + 6, 6},
		{"pck certificates", chainHdr + 6, end, 80},
	}
	if q.Padding > 0 {
		rs = append(rs, region{"zero padding", end, len(q.Raw), 8})
	}
	return rs
}

func failures(l check.List) map[string]bool {
	m := map[string]bool{}
	for _, c := range l {
		if c.Status == check.Fail {
			m[c.Name] = true
		}
	}
	return m
}

// TestMutations flips one byte at >= 200 positions of every real quote and
// requires every mutant to be rejected: a ParseError, or a check failing that
// did not fail on the original.
func TestMutations(t *testing.T) {
	masks := []byte{0x01, 0x80, 0xff, 0x20}
	total, parseRejected, verifyRejected := 0, 0, 0
	for _, rq := range realQuotes(t) {
		q, err := ParseQuote(rq.raw)
		if err != nil {
			t.Fatalf("%s: %v", rq.name, err)
		}
		base, baseErr := Verify(rq.raw, rq.opts)
		if base == nil {
			t.Fatalf("%s: %v", rq.name, baseErr)
		}
		baseFail := failures(base.Checks)
		positions := 0
		for _, rg := range regions(q) {
			size := rg.end - rg.start
			n := min(rg.n, size)
			for i := range n {
				pos := rg.start + i*size/n
				mut := append([]byte(nil), rq.raw...)
				mut[pos] ^= masks[(positions)%len(masks)]
				positions++
				total++
				cl, err := Verify(mut, rq.opts)
				var pe *check.ParseError
				if errors.As(err, &pe) {
					parseRejected++
					continue
				}
				newFail := ""
				if cl != nil {
					for n := range failures(cl.Checks) {
						if !baseFail[n] {
							newFail = n
						}
					}
				}
				var ve *check.VerifyError
				if newFail != "" && errors.As(err, &ve) {
					verifyRejected++
					continue
				}
				t.Errorf("%s: flip at offset %d (%s) accepted: err %v\n%s", rq.name, pos, rg.name, err, func() string {
					if cl == nil {
						return ""
					}
					return cl.Checks.String()
				}())
			}
		}
		if positions < 200 {
			t.Errorf("%s: only %d positions", rq.name, positions)
		}
	}
	fmt.Printf("mutation test: %d single-byte flips over %d real quotes: %d rejected as unusable input, %d rejected by verification, %d accepted\n",
		total, len(realQuotes(t)), parseRejected, verifyRejected, total-parseRejected-verifyRejected)
}

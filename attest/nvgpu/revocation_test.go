package nvgpu

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/attest/check"
)

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// No real OCSP answers exist offline; these check the outcomes that do not
// need one: unreachable responder = skipped (could not check), an answer
// that is not a valid OCSP response for the certificate = rejected.
func TestRevocationOutcomes(t *testing.T) {
	tc := realCases[0]
	var urls []string
	down := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		urls = append(urls, r.URL.String())
		return nil, errors.New("network unreachable")
	})}
	c, err := Verify(reportTD(t, tc.report), readTD(t, tc.chain), Options{HTTPClient: down})
	if err != nil {
		t.Fatal(err)
	}
	if ck, _ := c.Checks.Find(CheckRevocation); ck.Status != check.Skipped || !strings.Contains(ck.Reason, "unavailable") {
		t.Errorf("unreachable: %+v", ck)
	}
	if len(urls) != 1 || !strings.Contains(urls[0], "ocsp.ndis.nvidia.com") {
		t.Errorf("ocsp urls %v", urls)
	}
	garbage := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("not ocsp")), Header: http.Header{}}, nil
	})}
	_, err = Verify(reportTD(t, tc.report), readTD(t, tc.chain), Options{HTTPClient: garbage})
	var ve *check.VerifyError
	if !errors.As(err, &ve) || ve.Check != CheckRevocation {
		t.Errorf("garbage answer: %v", err)
	}
}

func BenchmarkVerifyBlackwell(b *testing.B) {
	tc := realCases[2]
	rep, chain := reportTD(b, tc.report), readTD(b, tc.chain)
	opts := Options{Nonce: mustHex(tc.nonce)}
	for b.Loop() {
		if _, err := Verify(rep, chain, opts); err != nil {
			b.Fatal(err)
		}
	}
}

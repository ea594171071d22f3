package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/internal/stats"
	"github.com/sparkinfer/cc/policy"
)

// BenchmarkRoundTripInProcess sends one-token chat requests to one
// in-process server (real HTTP on loopback, plaintext allowed) in pairs:
// one encrypted with the client library and one plaintext, back to back,
// alternating which goes first. One -cpuprofile covers client and server.
// It reports the medians of the whole round trip of each kind (enc-ms,
// plain-ms), of the per-pair difference (added-ms), and of the part of
// that difference spent inside the server's handler (server-added-ms:
// reading, opening, generating, sealing and writing), in the client
// outside its HTTP transport (client-added-ms: encapsulating, opening the
// response) and in between (http-added-ms: the network and both HTTP
// stacks), plus new TCP
// connections per request (conns/op: 0 when keep-alive works).
func BenchmarkRoundTripInProcess(b *testing.B) {
	s, _ := newServer(b, Config{AllowPlaintextUnsafe: true})
	var conns atomic.Int64
	var handlerNS atomic.Int64
	h := s.Handler()
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		handlerNS.Store(int64(time.Since(start)))
	}))
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	defer ts.Close()
	pb, err := os.ReadFile("../../policy/dev-simulated.json")
	if err != nil {
		b.Fatal(err)
	}
	pol, err := policy.Parse(pb)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{
		"model": "stories260K", "messages": []map[string]string{{"role": "user", "content": "Once upon a time"}},
		"max_tokens": 1,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var transportNS atomic.Int64
	rt := timedTransport{rt: http.DefaultTransport, last: &transportNS}
	c := &client.Client{BaseURL: ts.URL, Policy: pol, HTTP: &http.Client{Transport: rt}}
	hc := &http.Client{Transport: rt}
	if _, err := c.Attest(ctx); err != nil {
		b.Fatal(err)
	}
	// Each returns the round trip, the time inside the handler and the
	// time from sending the request to having read the response headers.
	encrypted := func() (time.Duration, time.Duration, time.Duration) {
		start := time.Now()
		resp, err := c.Do(ctx, ChatCompletionsPath, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp); err != nil || resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode, err)
		}
		resp.Close()
		return time.Since(start), time.Duration(handlerNS.Load()), time.Duration(transportNS.Load())
	}
	plaintext := func() (time.Duration, time.Duration, time.Duration) {
		start := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+ChatCompletionsPath, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode, err)
		}
		resp.Body.Close()
		return time.Since(start), time.Duration(handlerNS.Load()), time.Duration(transportNS.Load())
	}
	var enc, plain, diff, sdiff, cdiff, ndiff []float64
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	n0 := conns.Load()
	i := 0
	for b.Loop() {
		var e, p, se, sp, te, tp time.Duration
		if i%2 == 0 {
			e, se, te = encrypted()
			p, sp, tp = plaintext()
		} else {
			p, sp, tp = plaintext()
			e, se, te = encrypted()
		}
		i++
		enc, plain = append(enc, ms(e)), append(plain, ms(p))
		diff, sdiff = append(diff, ms(e-p)), append(sdiff, ms(se-sp))
		// Outside the transport: the client's own work (encapsulating,
		// opening). Inside it but outside the handler: the network and
		// the HTTP stacks.
		cdiff = append(cdiff, ms((e-te)-(p-tp)))
		ndiff = append(ndiff, ms((te-se)-(tp-sp)))
	}
	b.ReportMetric(stats.Median(enc), "enc-ms")
	b.ReportMetric(stats.Median(plain), "plain-ms")
	b.ReportMetric(stats.Median(diff), "added-ms")
	b.ReportMetric(stats.Median(sdiff), "server-added-ms")
	b.ReportMetric(stats.Median(cdiff), "client-added-ms")
	b.ReportMetric(stats.Median(ndiff), "http-added-ms")
	b.ReportMetric(float64(conns.Load()-n0)/float64(2*b.N), "conns/op")
}

// timedTransport records how long the last round trip took (request
// written, response headers read).
type timedTransport struct {
	rt   http.RoundTripper
	last *atomic.Int64
}

func (t timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.rt.RoundTrip(r)
	t.last.Store(int64(time.Since(start)))
	return resp, err
}

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
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/policy"
)

// BenchmarkRoundTripInProcess sends one-token chat requests to one
// in-process server (real HTTP on loopback, plaintext allowed) in pairs:
// one encrypted with the client library and one plaintext, back to back,
// alternating which goes first. One -cpuprofile covers client and server.
// It reports the medians of the whole round trip of each kind (enc-ms,
// plain-ms), of the per-pair difference (added-ms), and of the part of
// that difference spent inside the server's handler (server-added-ms:
// reading, opening, generating, sealing and writing), plus new TCP
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
	c := &client.Client{BaseURL: ts.URL, Policy: pol, HTTP: &http.Client{}}
	hc := &http.Client{}
	if _, err := c.Attest(ctx); err != nil {
		b.Fatal(err)
	}
	// Each returns the round trip and the time inside the handler.
	encrypted := func() (time.Duration, time.Duration) {
		start := time.Now()
		resp, err := c.Do(ctx, ChatCompletionsPath, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp); err != nil || resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode, err)
		}
		resp.Close()
		return time.Since(start), time.Duration(handlerNS.Load())
	}
	plaintext := func() (time.Duration, time.Duration) {
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
		return time.Since(start), time.Duration(handlerNS.Load())
	}
	var enc, plain, diff, sdiff []float64
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	n0 := conns.Load()
	i := 0
	for b.Loop() {
		var e, p, se, sp time.Duration
		if i%2 == 0 {
			e, se = encrypted()
			p, sp = plaintext()
		} else {
			p, sp = plaintext()
			e, se = encrypted()
		}
		i++
		enc, plain = append(enc, ms(e)), append(plain, ms(p))
		diff, sdiff = append(diff, ms(e-p)), append(sdiff, ms(se-sp))
	}
	b.ReportMetric(median(enc), "enc-ms")
	b.ReportMetric(median(plain), "plain-ms")
	b.ReportMetric(median(diff), "added-ms")
	b.ReportMetric(median(sdiff), "server-added-ms")
	b.ReportMetric(float64(conns.Load()-n0)/float64(2*b.N), "conns/op")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

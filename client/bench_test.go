package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sparkinfer/cc/client"
)

var (
	plainOnce sync.Once
	plainProc *process
)

// plaintextAppliance is a second appliance that also accepts plaintext
// (--allow-plaintext-unsafe), so both kinds of request hit the same server.
// With SPARKINFER_BENCH_SERVER_CPUS set (a taskset CPU list, e.g. "1") the
// appliance runs pinned to those CPUs, so that a benchmark pinned to others
// (taskset -c 0 ./client.test ...) measures client and appliance without
// competing for one core, as on two machines.
func plaintextAppliance(b *testing.B) *process {
	sparkinfer, _ := binaries(b)
	plainOnce.Do(func() {
		args := []string{"serve", "--tee", "sim", "--listen", "127.0.0.1:0", "--allow-plaintext-unsafe"}
		if cpus := os.Getenv("SPARKINFER_BENCH_SERVER_CPUS"); cpus != "" {
			plainProc = startDetached(b, "taskset", append([]string{"-c", cpus, sparkinfer}, args...)...)
			return
		}
		plainProc = startDetached(b, sparkinfer, args...)
	})
	return plainProc
}

func benchBody(maxTokens int, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": "stories260K", "messages": []map[string]string{{"role": "user", "content": "Once upon a time"}},
		"max_tokens": maxTokens, "stream": stream,
	})
	return b
}

// plainPost is the plaintext request, with the same HTTP plumbing as the
// client's encrypted one (own http.Client, request with a context).
func plainPost(cx context.Context, hc *http.Client, url string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(cx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return hc.Do(req)
}

// BenchmarkRoundTrip compares one encrypted request (encapsulate, post,
// decrypt; evidence verified once and cached) with the same request in
// plaintext, against the same server, generating one token.
func BenchmarkRoundTrip(b *testing.B) {
	srv := plaintextAppliance(b)
	body := benchBody(1, false)
	b.Run("encrypted", func(b *testing.B) {
		c := &client.Client{BaseURL: srv.url(), Policy: devPolicy(b), HTTP: &http.Client{}}
		// One context for the whole loop: ctx(b) per iteration would leave
		// a live timer and a cleanup per request, a cost only this
		// sub-benchmark would pay.
		cx := ctx(b)
		if _, err := c.Attest(cx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			resp, err := c.Do(cx, client.ChatCompletionsPath, body)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, resp); err != nil || resp.StatusCode != 200 {
				b.Fatal(resp.StatusCode, err)
			}
			resp.Close()
		}
	})
	b.Run("plaintext", func(b *testing.B) {
		hc, cx := &http.Client{}, ctx(b)
		for b.Loop() {
			resp, err := plainPost(cx, hc, srv.url()+client.ChatCompletionsPath, body)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
				b.Fatal(resp.StatusCode, err)
			}
			resp.Body.Close()
		}
	})
}

// BenchmarkRoundTripPaired sends the requests of BenchmarkRoundTrip in
// pairs, one encrypted and one plaintext back to back (alternating which
// goes first), so both kinds see the same machine load, and reports the
// medians of each kind and of the per-pair difference (added-ms): on a
// shared machine, load that drifts between two separate sub-benchmarks
// is larger than the difference itself.
func BenchmarkRoundTripPaired(b *testing.B) {
	srv := plaintextAppliance(b)
	body := benchBody(1, false)
	c := &client.Client{BaseURL: srv.url(), Policy: devPolicy(b), HTTP: &http.Client{}}
	hc, cx := &http.Client{}, ctx(b)
	if _, err := c.Attest(cx); err != nil {
		b.Fatal(err)
	}
	encrypted := func() time.Duration {
		start := time.Now()
		resp, err := c.Do(cx, client.ChatCompletionsPath, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp); err != nil || resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode, err)
		}
		resp.Close()
		return time.Since(start)
	}
	plaintext := func() time.Duration {
		start := time.Now()
		resp, err := plainPost(cx, hc, srv.url()+client.ChatCompletionsPath, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode, err)
		}
		resp.Body.Close()
		return time.Since(start)
	}
	var enc, plain, diff []float64
	i := 0
	for b.Loop() {
		var e, p time.Duration
		if i%2 == 0 {
			e, p = encrypted(), plaintext()
		} else {
			p, e = plaintext(), encrypted()
		}
		i++
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		enc, plain, diff = append(enc, ms(e)), append(plain, ms(p)), append(diff, ms(e-p))
	}
	b.ReportMetric(median(enc), "enc-ms")
	b.ReportMetric(median(plain), "plain-ms")
	b.ReportMetric(median(diff), "added-ms")
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

// BenchmarkStreamDecode compares streamed decode throughput (events per
// second over a 128-token streamed answer) encrypted and in plaintext.
func BenchmarkStreamDecode(b *testing.B) {
	srv := plaintextAppliance(b)
	body := benchBody(128, true)
	count := func(b *testing.B, r io.Reader) int {
		s := client.NewSSEReader(r)
		n := 0
		for {
			_, err := s.Next()
			if errors.Is(err, io.EOF) {
				return n
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	b.Run("encrypted", func(b *testing.B) {
		c := &client.Client{BaseURL: srv.url(), Policy: devPolicy(b), HTTP: &http.Client{}}
		cx := ctx(b)
		if _, err := c.Attest(cx); err != nil {
			b.Fatal(err)
		}
		events := 0
		for b.Loop() {
			resp, err := c.Do(cx, client.ChatCompletionsPath, body)
			if err != nil {
				b.Fatal(err)
			}
			events += count(b, resp)
			resp.Close()
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("plaintext", func(b *testing.B) {
		hc, cx := &http.Client{}, ctx(b)
		events := 0
		for b.Loop() {
			resp, err := plainPost(cx, hc, srv.url()+client.ChatCompletionsPath, body)
			if err != nil {
				b.Fatal(err)
			}
			events += count(b, resp.Body)
			resp.Body.Close()
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkStreamDecodePaired streams the 128-token answer of
// BenchmarkStreamDecode encrypted and in plaintext back to back (alternating
// which goes first), so that drifting machine load does not decide the
// comparison. It reports medians of each kind's decode rate — events per
// second from the first event to the last, i.e. while tokens stream, which
// leaves out the request's set-up (encapsulation, prefill) — and of the
// per-pair change (slower-%: how much lower the encrypted rate is than the
// plaintext one next to it); and the same over the whole request
// (request-slower-%: set-up included, as BenchmarkStreamDecode measures).
func BenchmarkStreamDecodePaired(b *testing.B) {
	srv := plaintextAppliance(b)
	body := benchBody(128, true)
	c := &client.Client{BaseURL: srv.url(), Policy: devPolicy(b), HTTP: &http.Client{}}
	hc, cx := &http.Client{}, ctx(b)
	if _, err := c.Attest(cx); err != nil {
		b.Fatal(err)
	}
	type rates struct{ decode, request float64 }
	// measure reads a stream, timing its first and last events
	measure := func(start time.Time, r io.Reader) rates {
		s := client.NewSSEReader(r)
		n := 0
		var first, last time.Time
		for {
			_, err := s.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			last = time.Now()
			if n == 0 {
				first = last
			}
			n++
		}
		if n < 2 {
			b.Fatalf("%d events", n)
		}
		return rates{float64(n-1) / last.Sub(first).Seconds(), float64(n) / time.Since(start).Seconds()}
	}
	encrypted := func() rates {
		start := time.Now()
		resp, err := c.Do(cx, client.ChatCompletionsPath, body)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Close()
		return measure(start, resp)
	}
	plaintext := func() rates {
		start := time.Now()
		resp, err := plainPost(cx, hc, srv.url()+client.ChatCompletionsPath, body)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		return measure(start, resp.Body)
	}
	var enc, plain, slower, reqSlower []float64
	i := 0
	for b.Loop() {
		var e, p rates
		if i%2 == 0 {
			e, p = encrypted(), plaintext()
		} else {
			p, e = plaintext(), encrypted()
		}
		i++
		enc, plain = append(enc, e.decode), append(plain, p.decode)
		slower = append(slower, 100*(p.decode-e.decode)/p.decode)
		reqSlower = append(reqSlower, 100*(p.request-e.request)/p.request)
	}
	b.ReportMetric(median(enc), "enc-events/s")
	b.ReportMetric(median(plain), "plain-events/s")
	b.ReportMetric(median(slower), "slower-%")
	b.ReportMetric(median(reqSlower), "request-slower-%")
}

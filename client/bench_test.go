package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/internal/stats"
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

// benchPair holds the two ways one benchmark sends the same body to the
// same appliance: encrypted with the client library (evidence verified
// once and cached) and in plaintext with the same HTTP plumbing (own
// http.Client, one context for the whole loop: a context per request would
// leave a live timer and a cleanup per request, a cost only one kind would
// pay).
type benchPair struct {
	b    *testing.B
	c    *client.Client
	hc   *http.Client
	cx   context.Context
	url  string
	body []byte
}

func newBenchPair(b *testing.B, body []byte) *benchPair {
	srv := plaintextAppliance(b)
	p := &benchPair{b: b, c: &client.Client{BaseURL: srv.url(), Policy: devPolicy(b), HTTP: &http.Client{}},
		hc: &http.Client{}, cx: ctx(b), url: srv.url(), body: body}
	if _, err := p.c.Attest(p.cx); err != nil {
		b.Fatal(err)
	}
	return p
}

// encrypted sends the body encrypted and returns the opened answer.
func (p *benchPair) encrypted() io.ReadCloser {
	resp, err := p.c.Do(p.cx, client.ChatCompletionsPath, p.body)
	if err != nil {
		p.b.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Close()
		p.b.Fatalf("encrypted request: status %d", resp.StatusCode)
	}
	return resp
}

// plaintext sends the body in plaintext and returns the answer.
func (p *benchPair) plaintext() io.ReadCloser {
	req, err := http.NewRequestWithContext(p.cx, http.MethodPost, p.url+client.ChatCompletionsPath, bytes.NewReader(p.body))
	if err != nil {
		p.b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.hc.Do(req)
	if err != nil {
		p.b.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		p.b.Fatalf("plaintext request: status %d", resp.StatusCode)
	}
	return resp.Body
}

// drain reads an answer to its end and closes it.
func drain(b *testing.B, r io.ReadCloser) {
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		b.Fatal(err)
	}
}

// readEvents reads a streamed answer to its end, timing its first and last
// events, and closes it.
func readEvents(b *testing.B, r io.ReadCloser) (n int, first, last time.Time) {
	defer r.Close()
	s := client.NewSSEReader(r)
	for {
		_, err := s.Next()
		if errors.Is(err, io.EOF) {
			return n, first, last
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
}

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// BenchmarkRoundTrip compares one encrypted request (encapsulate, post,
// decrypt) with the same request in plaintext, against the same server,
// generating one token.
func BenchmarkRoundTrip(b *testing.B) {
	body := benchBody(1, false)
	b.Run("encrypted", func(b *testing.B) {
		p := newBenchPair(b, body)
		for b.Loop() {
			drain(b, p.encrypted())
		}
	})
	b.Run("plaintext", func(b *testing.B) {
		p := newBenchPair(b, body)
		for b.Loop() {
			drain(b, p.plaintext())
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
	p := newBenchPair(b, benchBody(1, false))
	encrypted := func() time.Duration { return timed(func() { drain(b, p.encrypted()) }) }
	plaintext := func() time.Duration { return timed(func() { drain(b, p.plaintext()) }) }
	var enc, plain, diff []float64
	i := 0
	for b.Loop() {
		var e, q time.Duration
		if i%2 == 0 {
			e, q = encrypted(), plaintext()
		} else {
			q, e = plaintext(), encrypted()
		}
		i++
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		enc, plain, diff = append(enc, ms(e)), append(plain, ms(q)), append(diff, ms(e-q))
	}
	b.ReportMetric(stats.Median(enc), "enc-ms")
	b.ReportMetric(stats.Median(plain), "plain-ms")
	b.ReportMetric(stats.Median(diff), "added-ms")
}

// BenchmarkStreamDecode compares streamed decode throughput (events per
// second over a 128-token streamed answer) encrypted and in plaintext.
func BenchmarkStreamDecode(b *testing.B) {
	body := benchBody(128, true)
	run := func(b *testing.B, send func(*benchPair) io.ReadCloser) {
		p := newBenchPair(b, body)
		events := 0
		for b.Loop() {
			n, _, _ := readEvents(b, send(p))
			events += n
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("encrypted", func(b *testing.B) { run(b, (*benchPair).encrypted) })
	b.Run("plaintext", func(b *testing.B) { run(b, (*benchPair).plaintext) })
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
	p := newBenchPair(b, benchBody(128, true))
	type rates struct{ decode, request float64 }
	measure := func(send func() io.ReadCloser) rates {
		start := time.Now()
		n, first, last := readEvents(b, send())
		if n < 2 {
			b.Fatalf("%d events", n)
		}
		return rates{float64(n-1) / last.Sub(first).Seconds(), float64(n) / time.Since(start).Seconds()}
	}
	var enc, plain, slower, reqSlower []float64
	i := 0
	for b.Loop() {
		var e, q rates
		if i%2 == 0 {
			e, q = measure(p.encrypted), measure(p.plaintext)
		} else {
			q, e = measure(p.plaintext), measure(p.encrypted)
		}
		i++
		enc, plain = append(enc, e.decode), append(plain, q.decode)
		slower = append(slower, 100*(q.decode-e.decode)/q.decode)
		reqSlower = append(reqSlower, 100*(q.request-e.request)/q.request)
	}
	b.ReportMetric(stats.Median(enc), "enc-events/s")
	b.ReportMetric(stats.Median(plain), "plain-events/s")
	b.ReportMetric(stats.Median(slower), "slower-%")
	b.ReportMetric(stats.Median(reqSlower), "request-slower-%")
}

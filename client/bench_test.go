package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/sparkinfer/cc/client"
)

var (
	plainOnce sync.Once
	plainProc *process
)

// plaintextAppliance is a second appliance that also accepts plaintext
// (--allow-plaintext-unsafe), so both kinds of request hit the same server.
func plaintextAppliance(b *testing.B) *process {
	sparkinfer, _ := binaries(b)
	plainOnce.Do(func() {
		plainProc = startDetached(b, sparkinfer, "serve", "--tee", "sim", "--listen", "127.0.0.1:0", "--allow-plaintext-unsafe")
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

// BenchmarkRoundTrip compares one encrypted request (encapsulate, post,
// decrypt; evidence verified once and cached) with the same request in
// plaintext, against the same server, generating one token.
func BenchmarkRoundTrip(b *testing.B) {
	srv := plaintextAppliance(b)
	body := benchBody(1, false)
	b.Run("encrypted", func(b *testing.B) {
		c := &client.Client{BaseURL: srv.url(), Policy: devPolicy(b), HTTP: &http.Client{}}
		if _, err := c.Attest(ctx(b)); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			resp, err := c.Do(ctx(b), client.ChatCompletionsPath, body)
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
		for b.Loop() {
			resp, err := http.Post(srv.url()+client.ChatCompletionsPath, "application/json", bytes.NewReader(body))
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
		if _, err := c.Attest(ctx(b)); err != nil {
			b.Fatal(err)
		}
		events := 0
		for b.Loop() {
			resp, err := c.Do(ctx(b), client.ChatCompletionsPath, body)
			if err != nil {
				b.Fatal(err)
			}
			events += count(b, resp)
			resp.Close()
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("plaintext", func(b *testing.B) {
		events := 0
		for b.Loop() {
			resp, err := http.Post(srv.url()+client.ChatCompletionsPath, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			events += count(b, resp.Body)
			resp.Body.Close()
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
}

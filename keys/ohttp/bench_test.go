package ohttp

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sparkinfer/cc/keys"
)

// liveGateway is a gateway over ks on the real clock, with room in its
// replay cache for every request a benchmark makes.
func liveGateway(b *testing.B, ks *keys.KeySet) *Gateway {
	b.Helper()
	rc, err := NewReplayCache(1<<20, time.Minute, nil)
	if err != nil {
		b.Fatal(err)
	}
	return &Gateway{Keys: ks, Replay: rc}
}

// gatewayAnswer is the appliance's side of one request: msg decapsulated
// by gw, body sealed as the response.
func gatewayAnswer(b *testing.B, gw *Gateway, msg, body []byte) []byte {
	b.Helper()
	sr, err := gw.Decapsulate(msg)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := sr.SealResponse(nil, body)
	if err != nil {
		b.Fatal(err)
	}
	return resp
}

// BenchmarkRequestRoundTrip measures what encryption adds to one request
// with a 4 KiB body: client encapsulation, gateway decapsulation (with the
// replay check), and a 4 KiB response sealed and opened.
func BenchmarkRequestRoundTrip(b *testing.B) {
	ks := vectorKeySet(b)
	body := []byte(strings.Repeat("a", 4096))
	for _, tc := range allSuites {
		b.Run(strings.ReplaceAll(tc.suite.String(), "/", "_"), func(b *testing.B) {
			gw := liveGateway(b, ks)
			kp, _ := ks.Lookup(tc.keyID)
			cfg := kp.Config()
			b.SetBytes(2 * int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req := Request{Time: time.Now(), Path: "/v1/chat/completions", Body: body}
				msg, cr, err := EncapsulateRequest(cfg, tc.suite, req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := cr.OpenResponse(gatewayAnswer(b, gw, msg, body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGateway measures the appliance's share of one request with a
// 4 KiB body: decapsulation (with a replay check) and sealing a 4 KiB
// response.
func BenchmarkGateway(b *testing.B) {
	ks := vectorKeySet(b)
	body := []byte(strings.Repeat("a", 4096))
	for _, tc := range allSuites {
		b.Run(strings.ReplaceAll(tc.suite.String(), "/", "_"), func(b *testing.B) {
			kp, _ := ks.Lookup(tc.keyID)
			msg, _, err := EncapsulateRequest(kp.Config(), tc.suite, Request{Time: time.Now(), Path: "/v1/chat/completions", Body: body})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(2 * int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				// A fresh replay cache, so the same message opens every time.
				rc, _ := NewReplayCache(16, time.Minute, nil)
				gatewayAnswer(b, &Gateway{Keys: ks, Replay: rc}, msg, body)
			}
		})
	}
}

// BenchmarkChunk measures sealing and opening one 256-byte SSE chunk of a
// streamed response.
func BenchmarkChunk(b *testing.B) {
	ks := vectorKeySet(b)
	chunk := []byte("data: " + strings.Repeat("x", 248) + "\n\n")
	for _, tc := range allSuites {
		b.Run(strings.ReplaceAll(tc.suite.String(), "/", "_"), func(b *testing.B) {
			gw := vectorGateway(b, ks)
			kp, _ := ks.Lookup(tc.keyID)
			msg, cr, err := EncapsulateRequest(kp.Config(), tc.suite, Request{Time: vectorTime, Path: "/v1/completions"})
			if err != nil {
				b.Fatal(err)
			}
			sr, err := gw.Decapsulate(msg)
			if err != nil {
				b.Fatal(err)
			}
			b.Run("seal", func(b *testing.B) {
				rw, err := sr.NewResponseWriter(io.Discard, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(chunk)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := rw.Write(chunk); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("open", func(b *testing.B) {
				// Open a pre-sealed batch of chunks over and over; restarting
				// the reader (a key derivation) is outside the timer.
				const batch = 1024
				var buf bytes.Buffer
				rw, err := sr.NewResponseWriter(&buf, nil)
				if err != nil {
					b.Fatal(err)
				}
				for range batch {
					rw.Write(chunk)
				}
				rw.Final(nil)
				sealed := buf.Bytes()
				rr := cr.NewResponseReader(bytes.NewReader(sealed))
				b.SetBytes(int64(len(chunk)))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if i == batch {
						b.StopTimer()
						rr, i = cr.NewResponseReader(bytes.NewReader(sealed)), 0
						b.StartTimer()
					}
					if _, err := rr.Next(); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}

// BenchmarkClient measures the client's share of one request with a 4 KiB
// body, the key configuration parsed once (ClientKey): one encapsulation and
// opening one 4 KiB response. The responses it opens are made in batches
// with the timer stopped (encapsulated, opened and sealed by the gateway),
// so the timer runs over client work only.
func BenchmarkClient(b *testing.B) {
	ks := vectorKeySet(b)
	body := []byte(strings.Repeat("a", 4096))
	for _, tc := range allSuites {
		b.Run(strings.ReplaceAll(tc.suite.String(), "/", "_"), func(b *testing.B) {
			gw := liveGateway(b, ks)
			kp, _ := ks.Lookup(tc.keyID)
			ck, err := NewClientKey(kp.Config())
			if err != nil {
				b.Fatal(err)
			}
			type answered struct {
				cr   *ClientRequest
				resp []byte
			}
			const batch = 256
			var ready []answered
			refill := func() {
				ready = ready[:0]
				for range batch {
					msg, cr, err := ck.Encapsulate(tc.suite, Request{Time: time.Now(), Path: "/v1/chat/completions", Body: body})
					if err != nil {
						b.Fatal(err)
					}
					ready = append(ready, answered{cr, gatewayAnswer(b, gw, msg, body)})
				}
			}
			b.SetBytes(2 * int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if len(ready) == 0 {
					b.StopTimer()
					refill()
					b.StartTimer()
				}
				if _, _, err := ck.Encapsulate(tc.suite, Request{Time: time.Now(), Path: "/v1/chat/completions", Body: body}); err != nil {
					b.Fatal(err)
				}
				a := ready[len(ready)-1]
				ready = ready[:len(ready)-1]
				if _, err := a.cr.OpenResponse(a.resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

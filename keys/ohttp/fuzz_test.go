package ohttp

import (
	"errors"
	"io"
	"os"
	"testing"

	"github.com/sparkinfer/cc/keys"
	"github.com/sparkinfer/cc/keys/internal/protovec"
)

func docVectors(t testing.TB) map[string][]byte {
	t.Helper()
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := protovec.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// FuzzDecapsulateRequest feeds arbitrary messages to a gateway holding the
// vector keys: every failure must be a *RequestError, never a panic.
func FuzzDecapsulateRequest(f *testing.F) {
	v := docVectors(f)
	n := 0
	for _, name := range []string{"xwing/request", "x25519/request"} {
		if b, ok := v[name]; ok {
			f.Add(b)
			n++
		}
	}
	if n != 2 {
		f.Fatalf("only %d of 2 request seeds found in docs/PROTOCOL.md", n)
	}
	ks := vectorKeySet(f)
	f.Fuzz(func(t *testing.T, msg []byte) {
		// A fresh cache each time, so the seeds open (not "replayed").
		gw := vectorGateway(t, ks)
		sr, err := gw.Decapsulate(msg)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if len(sr.Path) == 0 || sr.Path[0] != '/' {
			t.Fatalf("accepted path %q", sr.Path)
		}
	})
}

// FuzzOpenStream feeds arbitrary response bytes to the clients of the two
// vector requests: every failure must be a *StreamError, never a panic, and
// io.EOF only after an authenticated final chunk.
func FuzzOpenStream(f *testing.F) {
	v := docVectors(f)
	clients := map[byte]*ClientRequest{}
	for i, c := range vectorCases {
		enc, secret, resp := v[c.name+"/enc"], v[c.name+"/response-secret"], v[c.name+"/response"]
		if enc == nil || secret == nil || resp == nil {
			f.Fatalf("vector %s incomplete in docs/PROTOCOL.md", c.name)
		}
		clients[byte(i)] = &ClientRequest{suite: c.suite, enc: enc, secret: secret}
		f.Add(byte(i), resp)
	}
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		cr := clients[which%byte(len(clients))]
		rr := cr.NewResponseReader(&byteReader{b: data})
		for range 1 << 16 {
			_, err := rr.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				var se *StreamError
				var ue *keys.UnsupportedError
				if !errors.As(err, &se) && !errors.As(err, &ue) {
					t.Fatalf("untyped error %T: %v", err, err)
				}
				return
			}
		}
		t.Fatal("reader did not finish")
	})
}

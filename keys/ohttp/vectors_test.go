package ohttp

import (
	"bytes"
	"flag"
	"os"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/sparkinfer/cc/keys"
	"github.com/sparkinfer/cc/keys/internal/protovec"
)

var update = flag.Bool("update", false, "rewrite the test vectors in docs/PROTOCOL.md from the code")

const protocolDoc = "../../docs/PROTOCOL.md"

// seq returns n bytes start, start+1, ...
func seq(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

// vectorTime is the timestamp of every vector request: 2026-01-02T03:04:05Z.
var vectorTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// vectorKeySet is the key set of the vectors: X-Wing private key 00..1f,
// X25519 private key 20..3f.
func vectorKeySet(t testing.TB) *keys.KeySet {
	t.Helper()
	ks, err := keys.GenerateKeySet(bytes.NewReader(seq(0x00, 64)))
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func vectorGateway(t testing.TB, ks *keys.KeySet) *Gateway {
	t.Helper()
	rc, err := NewReplayCache(1024, DefaultMaxClockSkew, func() time.Time { return vectorTime })
	if err != nil {
		t.Fatal(err)
	}
	return &Gateway{Keys: ks, Replay: rc}
}

type vectorCase struct {
	name      string
	keyIndex  int
	suite     keys.Suite
	drbgSeed  uint64
	id        []byte
	path      string
	body      string
	respNonce []byte
	chunks    []string // the last one is sealed as the final chunk
}

var vectorCases = []vectorCase{
	{
		name:     "xwing",
		keyIndex: 0,
		suite:    keys.DefaultSuite,
		drbgSeed: 1,
		id:       seq(0xa0, 16),
		path:     "/v1/chat/completions",
		body:     `{"model":"stories260K","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":16,"stream":true}`,
		// max(Nn, Nk) = 32 for ChaCha20-Poly1305.
		respNonce: seq(0xc0, 32),
		chunks: []string{
			"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Once\"}}]}\n\n",
			"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" upon\"}}]}\n\n",
			"data: [DONE]\n\n",
		},
	},
	{
		name:     "x25519",
		keyIndex: 1,
		suite:    keys.SuiteX25519AES128GCM,
		drbgSeed: 2,
		id:       seq(0xb0, 16),
		path:     "/v1/completions",
		body:     `{"model":"stories260K","prompt":"Once upon a time","max_tokens":8}`,
		// max(Nn, Nk) = 16 for AES-128-GCM.
		respNonce: seq(0xd0, 16),
		chunks: []string{
			`{"id":"cmpl-1","object":"text_completion","model":"stories260K","choices":[{"index":0,"text":" there was a little girl","finish_reason":"length"}]}`,
		},
	},
}

// computeVectors produces every vector of docs/PROTOCOL.md from the code.
// The HPKE encapsulation randomness comes from crypto/hpke's internal
// source, made deterministic with testing/cryptotest.SetGlobalRandom.
func computeVectors(t *testing.T) map[string][]byte {
	v := map[string][]byte{}
	ks := vectorKeySet(t)
	cfgs := ks.Configs()
	v["xwing/private-key"] = seq(0x00, 32)
	v["x25519/private-key"] = seq(0x20, 32)
	for i, name := range []string{"xwing", "x25519"} {
		b, err := cfgs[i].MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		v[name+"/key-config"] = b
	}
	list, err := ks.MarshalConfigs()
	if err != nil {
		t.Fatal(err)
	}
	v["keyset/ohttp-keys"] = list
	gw := vectorGateway(t, ks)

	for _, c := range vectorCases {
		p := c.name + "/"
		var id [RequestIDSize]byte
		copy(id[:], c.id)
		req := Request{ID: id, Time: vectorTime, Path: c.path, Body: []byte(c.body)}
		pt, err := req.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		v[p+"request-id"] = c.id
		v[p+"timestamp"] = []byte("1767323045")
		v[p+"path"] = []byte(c.path)
		v[p+"body"] = []byte(c.body)
		v[p+"request-plaintext"] = pt

		cryptotest.SetGlobalRandom(t, c.drbgSeed)
		msg, cr, err := EncapsulateRequest(cfgs[c.keyIndex], c.suite, req)
		if err != nil {
			t.Fatal(err)
		}
		hdr := msg[:HeaderSize]
		v[p+"header"] = hdr
		v[p+"info"] = requestInfo(hdr)
		v[p+"enc"] = cr.enc
		v[p+"request-ciphertext"] = msg[HeaderSize+len(cr.enc):]
		v[p+"request"] = msg

		sr, err := gw.Decapsulate(msg)
		if err != nil {
			t.Fatalf("%s: decapsulate: %v", c.name, err)
		}
		if !bytes.Equal(sr.secret, cr.secret) {
			t.Fatalf("%s: client and gateway response secrets differ", c.name)
		}
		v[p+"response-secret"] = cr.secret
		v[p+"response-nonce"] = c.respNonce
		key, base, err := responseKeyBytes(c.suite, cr.secret, cr.enc, c.respNonce)
		if err != nil {
			t.Fatal(err)
		}
		v[p+"response-key"] = key
		v[p+"response-base-nonce"] = base

		var out bytes.Buffer
		rw, err := sr.NewResponseWriter(&out, bytes.NewReader(c.respNonce))
		if err != nil {
			t.Fatal(err)
		}
		for i, ch := range c.chunks {
			if len(c.chunks) > 1 {
				v[p+"chunk-"+string(rune('0'+i))] = []byte(ch)
			} else {
				v[p+"response-body"] = []byte(ch)
			}
			if i == len(c.chunks)-1 {
				err = rw.Final([]byte(ch))
			} else {
				_, err = rw.Write([]byte(ch))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		v[p+"response"] = out.Bytes()
	}
	return v
}

// TestProtocolVectors checks every vector of docs/PROTOCOL.md against the
// code byte for byte (go test -run TestProtocolVectors -update rewrites
// them), then opens the documented messages with the documented keys alone.
func TestProtocolVectors(t *testing.T) {
	want := computeVectors(t)
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		out, err := protovec.Rewrite(doc, want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(protocolDoc, out, 0o644); err != nil {
			t.Fatal(err)
		}
		doc = out
	}
	got, err := protovec.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("docs/PROTOCOL.md lacks vector %q", name)
			continue
		}
		if !bytes.Equal(g, w) {
			t.Errorf("docs/PROTOCOL.md vector %q differs from the code:\n doc  %x\n code %x\n(if crypto/hpke changed how it draws randomness, regenerate with -update and review the diff)", name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/PROTOCOL.md has vector %q that the code does not produce", name)
		}
	}
	if t.Failed() {
		return
	}

	// From the document alone: keys from the documented private keys,
	// requests opened, responses opened with the documented secrets.
	seed := append(bytes.Clone(got["xwing/private-key"]), got["x25519/private-key"]...)
	ks, err := keys.GenerateKeySet(bytes.NewReader(seed))
	if err != nil {
		t.Fatal(err)
	}
	gw := vectorGateway(t, ks)
	for _, c := range vectorCases {
		p := c.name + "/"
		sr, err := gw.Decapsulate(got[p+"request"])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(sr.Path) != string(got[p+"path"]) || !bytes.Equal(sr.Body, got[p+"body"]) || !bytes.Equal(sr.ID[:], got[p+"request-id"]) || sr.Time.Unix() != 1767323045 {
			t.Errorf("%s: opened request %+v does not match the documented fields", c.name, sr.Request)
		}
		cr := &ClientRequest{suite: c.suite, enc: got[p+"enc"], secret: got[p+"response-secret"]}
		body, err := cr.OpenResponse(got[p+"response"])
		if err != nil {
			t.Fatalf("%s: open documented response: %v", c.name, err)
		}
		var wantBody []byte
		if b, ok := got[p+"response-body"]; ok {
			wantBody = b
		} else {
			for i := range c.chunks {
				wantBody = append(wantBody, got[p+"chunk-"+string(rune('0'+i))]...)
			}
		}
		if !bytes.Equal(body, wantBody) {
			t.Errorf("%s: documented response opens to %q, want %q", c.name, body, wantBody)
		}
	}
}

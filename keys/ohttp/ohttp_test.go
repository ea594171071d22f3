package ohttp

import (
	"bytes"
	"crypto/hpke"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sparkinfer/cc/keys"
)

var allSuites = []struct {
	keyID uint8
	suite keys.Suite
}{
	{1, keys.DefaultSuite},
	{2, keys.SuiteX25519AES128GCM},
	{2, keys.SuiteX25519ChaCha20Poly1305},
}

func newRequest(t testing.TB, now time.Time, path, body string) Request {
	t.Helper()
	id, err := NewRequestID(nil)
	if err != nil {
		t.Fatal(err)
	}
	return Request{ID: id, Time: now, Path: path, Body: []byte(body)}
}

// clock is a settable clock for the replay cache.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func testGateway(t testing.TB, capacity int) (*Gateway, *clock) {
	t.Helper()
	c := &clock{t: vectorTime}
	rc, err := NewReplayCache(capacity, DefaultMaxClockSkew, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return &Gateway{Keys: vectorKeySet(t), Replay: rc}, c
}

func TestRoundTripAllSuites(t *testing.T) {
	gw, _ := testGateway(t, 64)
	for _, tc := range allSuites {
		t.Run(tc.suite.String(), func(t *testing.T) {
			kp, _ := gw.Keys.Lookup(tc.keyID)
			req := newRequest(t, vectorTime, "/v1/chat/completions", `{"model":"m"}`)
			msg, cr, err := EncapsulateRequest(kp.Config(), tc.suite, req)
			if err != nil {
				t.Fatal(err)
			}
			if cr.Suite() != tc.suite {
				t.Errorf("client suite %v", cr.Suite())
			}
			sr, err := gw.Decapsulate(msg)
			if err != nil {
				t.Fatal(err)
			}
			if sr.ID != req.ID || !sr.Time.Equal(req.Time) || sr.Path != req.Path || !bytes.Equal(sr.Body, req.Body) || sr.KeyID != tc.keyID || sr.Suite != tc.suite {
				t.Fatalf("decapsulated %+v, want %+v", sr, req)
			}
			// Streamed: empty writes are skipped, a long write is split.
			var out bytes.Buffer
			rw, err := sr.NewResponseWriter(&out, nil)
			if err != nil {
				t.Fatal(err)
			}
			long := bytes.Repeat([]byte("x"), MaxChunkSize+10)
			parts := [][]byte{[]byte("data: a\n\n"), {}, long}
			for _, p := range parts {
				if n, err := rw.Write(p); err != nil || n != len(p) {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if err := rw.Final(nil); err != nil {
				t.Fatal(err)
			}
			if err := rw.Final(nil); err == nil {
				t.Error("second Final succeeded")
			}
			rr := cr.NewResponseReader(bytes.NewReader(out.Bytes()))
			var got [][]byte
			for {
				p, err := rr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, p)
			}
			if len(got) != 4 || string(got[0]) != "data: a\n\n" || len(got[1]) != MaxChunkSize || len(got[2]) != 10 || len(got[3]) != 0 {
				t.Errorf("chunks: %d, sizes %v", len(got), lens(got))
			}
			if _, err := rr.Next(); err != io.EOF {
				t.Errorf("Next after the end = %v, want io.EOF", err)
			}
			// Read over the same stream.
			all, err := io.ReadAll(cr.NewResponseReader(bytes.NewReader(out.Bytes())))
			if err != nil || len(all) != 9+MaxChunkSize+10 {
				t.Errorf("ReadAll = %d bytes, %v", len(all), err)
			}
		})
	}
}

func lens(bs [][]byte) []int {
	var out []int
	for _, b := range bs {
		out = append(out, len(b))
	}
	return out
}

// stream returns a client and a response of n chunks (the last final),
// split into the nonce and the framed chunks.
func stream(t *testing.T, n int) (*ClientRequest, []byte, [][]byte, *ServerRequest) {
	t.Helper()
	gw, _ := testGateway(t, 64)
	kp, _ := gw.Keys.Lookup(1)
	msg, cr, err := EncapsulateRequest(kp.Config(), keys.DefaultSuite, newRequest(t, vectorTime, "/v1/completions", "{}"))
	if err != nil {
		t.Fatal(err)
	}
	sr, err := gw.Decapsulate(msg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rw, err := sr.NewResponseWriter(&out, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := []byte("chunk " + strings.Repeat("#", i))
		if i == n-1 {
			err = rw.Final(p)
		} else {
			_, err = rw.Write(p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	b := out.Bytes()
	nonce := b[:32]
	var frames [][]byte
	for off := 32; off < len(b); {
		l := int(binary.BigEndian.Uint32(b[off+1:]))
		frames = append(frames, b[off:off+5+l])
		off += 5 + l
	}
	if len(frames) != n {
		t.Fatalf("split %d frames, want %d", len(frames), n)
	}
	return cr, nonce, frames, sr
}

func join(nonce []byte, frames ...[]byte) []byte {
	return append(bytes.Clone(nonce), bytes.Join(frames, nil)...)
}

func TestStreamTampering(t *testing.T) {
	cr, nonce, f, _ := stream(t, 4)
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 1; return b }
	setFlag := func(b []byte, v byte) []byte { b = bytes.Clone(b); b[0] = v; return b }
	setLen := func(b []byte, v uint32) []byte { b = bytes.Clone(b); binary.BigEndian.PutUint32(b[1:], v); return b }

	// Another request's response, from the same server and key.
	other, ononce, of, _ := stream(t, 2)
	_ = other

	cases := []struct {
		name     string
		data     []byte
		want     error
		chunk    uint64
		got      uint64
		okChunks int // chunks returned before the error
	}{
		{"intact", join(nonce, f...), nil, 0, 0, 4},
		{"empty", nil, ErrTruncated, 0, 0, 0},
		{"nonce only", nonce, ErrTruncated, 0, 0, 0},
		{"short nonce", nonce[:10], ErrTruncated, 0, 0, 0},
		{"final dropped", join(nonce, f[0], f[1], f[2]), ErrTruncated, 3, 0, 3},
		{"cut in final", join(nonce, f[0], f[1], f[2], f[3][:len(f[3])-1]), ErrTruncated, 3, 0, 3},
		{"cut in header", join(nonce, f[0], f[1][:3]), ErrTruncated, 1, 0, 1},
		{"reordered", join(nonce, f[0], f[2], f[1], f[3]), ErrReordered, 1, 2, 1},
		{"dropped middle", join(nonce, f[0], f[2], f[3]), ErrReordered, 1, 2, 1},
		{"final first", join(nonce, f[3]), ErrReordered, 0, 3, 0},
		{"duplicated", join(nonce, f[0], f[1], f[1], f[2], f[3]), ErrDuplicated, 2, 1, 2},
		{"chunk after final", join(nonce, f[0], f[1], f[2], f[3], f[1]), ErrAfterFinal, 4, 0, 3},
		{"byte after final", append(join(nonce, f...), 0), ErrAfterFinal, 4, 0, 3},
		{"other request's response", join(ononce, of...), ErrWrongKey, 0, 0, 0},
		{"nonce altered", join(flip(nonce, 0), f...), ErrWrongKey, 0, 0, 0},
		{"mixed with other response", join(nonce, f[0], of[1]), ErrChunkAuth, 1, 0, 1},
		{"ciphertext altered", join(nonce, f[0], flip(f[1], 7), f[2], f[3]), ErrChunkAuth, 1, 0, 1},
		{"final flag set early", join(nonce, f[0], setFlag(f[1], 1), f[2], f[3]), ErrChunkAuth, 1, 0, 1},
		{"final flag cleared", join(nonce, f[0], f[1], f[2], setFlag(f[3], 0)), ErrChunkAuth, 3, 0, 3},
		{"unknown flags", join(nonce, f[0], setFlag(f[1], 2)), ErrMalformedChunk, 1, 0, 1},
		{"length below tag", join(nonce, setLen(f[0], 15)), ErrMalformedChunk, 0, 0, 0},
		{"length over cap", join(nonce, setLen(f[0], MaxChunkSize+17)), ErrMalformedChunk, 0, 0, 0},
		{"length too long for data", join(nonce, setLen(f[0], 1000)), ErrTruncated, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rr := cr.NewResponseReader(bytes.NewReader(tc.data))
			n := 0
			var err error
			for {
				_, err = rr.Next()
				if err != nil {
					break
				}
				n++
			}
			if tc.want == nil {
				if err != io.EOF || n != tc.okChunks {
					t.Fatalf("got %d chunks then %v, want %d then io.EOF", n, err, tc.okChunks)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			var se *StreamError
			if !errors.As(err, &se) || se.Chunk != tc.chunk || se.Got != tc.got {
				t.Errorf("error %#v, want chunk %d got %d", err, tc.chunk, tc.got)
			}
			if n != tc.okChunks {
				t.Errorf("%d chunks before the error, want %d", n, tc.okChunks)
			}
			// The error sticks.
			if _, err2 := rr.Next(); err2 != err {
				t.Errorf("Next after an error = %v, want the same error", err2)
			}
			if _, err := cr.OpenResponse(tc.data); !errors.Is(err, tc.want) {
				t.Errorf("OpenResponse error %v, want %v", err, tc.want)
			}
		})
	}
}

// A response sealed to another key pair altogether (another appliance).
func TestStreamOtherKeyPair(t *testing.T) {
	cr, _, _, _ := stream(t, 1)
	ks, err := keys.GenerateKeySet(nil)
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := NewReplayCache(8, time.Minute, nil)
	gw := &Gateway{Keys: ks, Replay: rc}
	kp, _ := ks.Lookup(1)
	msg, _, err := EncapsulateRequest(kp.Config(), keys.DefaultSuite, newRequest(t, time.Now(), "/v1/completions", "{}"))
	if err != nil {
		t.Fatal(err)
	}
	sr, err := gw.Decapsulate(msg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sr.SealResponse(nil, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cr.OpenResponse(resp); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("error %v, want ErrWrongKey", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestStreamReaderError(t *testing.T) {
	cr, nonce, f, _ := stream(t, 2)
	r := io.MultiReader(bytes.NewReader(join(nonce, f[0])), failingReader{})
	rr := cr.NewResponseReader(r)
	if _, err := rr.Next(); err != nil {
		t.Fatal(err)
	}
	_, err := rr.Next()
	if err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("error %v, want the reader's error", err)
	}
}

type errWriter struct{ n int }

func (w *errWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("broken pipe")
	}
	w.n--
	return len(p), nil
}

func TestResponseWriterErrors(t *testing.T) {
	_, _, _, sr := stream(t, 1)
	rw, err := sr.NewResponseWriter(&errWriter{n: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Write([]byte("b")); err == nil {
		t.Fatal("write to a broken writer succeeded")
	}
	if err := rw.Final(nil); err == nil {
		t.Fatal("Final after a write error succeeded")
	}
	if _, err := sr.NewResponseWriter(io.Discard, bytes.NewReader([]byte{1, 2})); err == nil {
		t.Fatal("short nonce randomness accepted")
	}
}

// sealRaw encapsulates an arbitrary plaintext with a given header, for
// malformed-plaintext and header tests.
func sealRaw(t *testing.T, cfg keys.KeyConfig, hdr, pt []byte, s keys.Suite) []byte {
	t.Helper()
	pk, err := cfg.HPKEPublicKey()
	if err != nil {
		t.Fatal(err)
	}
	_, kdf, aead, err := s.HPKE()
	if err != nil {
		t.Fatal(err)
	}
	enc, snd, err := hpke.NewSender(pk, kdf, aead, requestInfo(hdr))
	if err != nil {
		t.Fatal(err)
	}
	ct, err := snd.Seal(nil, pt)
	if err != nil {
		t.Fatal(err)
	}
	return append(append(bytes.Clone(hdr), enc...), ct...)
}

func TestGatewayRejects(t *testing.T) {
	gw, clk := testGateway(t, 3)
	xw, _ := gw.Keys.Lookup(1)
	x, _ := gw.Keys.Lookup(2)
	good := func(s keys.Suite, cfg keys.KeyConfig, ts time.Time) []byte {
		msg, _, err := EncapsulateRequest(cfg, s, newRequest(t, ts, "/v1/completions", "{}"))
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 0x80; return b }
	okMsg := good(keys.SuiteX25519AES128GCM, x.Config(), vectorTime)
	plaintext := func(ts time.Time) []byte {
		p, _ := newRequest(t, ts, "/v1/completions", "{}").MarshalBinary()
		return p
	}
	withHeader := func(b []byte, keyID uint8, s keys.Suite) []byte {
		return append(Header(keyID, s), b[HeaderSize:]...)
	}
	bigGW := &Gateway{Keys: gw.Keys, Replay: gw.Replay, MaxRequestSize: 50}

	cases := []struct {
		name   string
		gw     *Gateway
		msg    []byte
		want   error
		status int
		code   string
	}{
		{"too large", bigGW, okMsg, ErrRequestTooLarge, 413, "request_too_large"},
		{"empty", gw, nil, ErrMalformedRequest, 400, "malformed_request"},
		{"short header", gw, okMsg[:6], ErrMalformedRequest, 400, "malformed_request"},
		{"unknown key id", gw, withHeader(okMsg, 9, keys.SuiteX25519AES128GCM), ErrUnknownKeyID, 400, "unknown_key_id"},
		{"kem not of key", gw, withHeader(okMsg, 2, keys.DefaultSuite), ErrUnsupportedSuite, 400, "unsupported_suite"},
		{"aead not offered", gw, withHeader(good(keys.DefaultSuite, xw.Config(), vectorTime), 1, keys.Suite{KEM: keys.KEMMLKEM768X25519, KDF: 1, AEAD: keys.AEADAES128GCM}), ErrUnsupportedSuite, 400, "unsupported_suite"},
		{"unknown kdf", gw, withHeader(okMsg, 2, keys.Suite{KEM: keys.KEMX25519HKDFSHA256, KDF: 2, AEAD: 1}), ErrUnsupportedSuite, 400, "unsupported_suite"},
		{"truncated enc", gw, okMsg[:HeaderSize+20], ErrMalformedRequest, 400, "malformed_request"},
		{"no tag", gw, okMsg[:HeaderSize+32+15], ErrMalformedRequest, 400, "malformed_request"},
		{"header suite switched", gw, withHeader(okMsg, 2, keys.SuiteX25519ChaCha20Poly1305), ErrDecryption, 400, "decryption_failed"},
		{"enc altered", gw, flip(okMsg, HeaderSize+3), ErrDecryption, 400, "decryption_failed"},
		{"low-order enc", gw, append(append(Header(2, keys.SuiteX25519AES128GCM), make([]byte, 32)...), okMsg[HeaderSize+32:]...), ErrDecryption, 400, "decryption_failed"},
		{"ciphertext altered", gw, flip(okMsg, len(okMsg)-1), ErrDecryption, 400, "decryption_failed"},
		{"xwing ciphertext altered", gw, flip(good(keys.DefaultSuite, xw.Config(), vectorTime), HeaderSize+1120+2), ErrDecryption, 400, "decryption_failed"},
		{"plaintext too short", gw, sealRaw(t, x.Config(), Header(2, keys.SuiteX25519AES128GCM), []byte("short"), keys.SuiteX25519AES128GCM), ErrMalformedPlaintext, 400, "malformed_plaintext"},
		{"plaintext path bad", gw, sealRaw(t, x.Config(), Header(2, keys.SuiteX25519AES128GCM), append(plaintext(vectorTime)[:25], "\x02ab{}"...), keys.SuiteX25519AES128GCM), ErrMalformedPlaintext, 400, "malformed_plaintext"},
		{"plaintext path overruns", gw, sealRaw(t, x.Config(), Header(2, keys.SuiteX25519AES128GCM), append(plaintext(vectorTime)[:25], "\x09/v1"...), keys.SuiteX25519AES128GCM), ErrMalformedPlaintext, 400, "malformed_plaintext"},
		{"stale", gw, good(keys.SuiteX25519AES128GCM, x.Config(), vectorTime.Add(-61*time.Second)), ErrStaleRequest, 400, "stale_request"},
		{"future", gw, good(keys.SuiteX25519AES128GCM, x.Config(), vectorTime.Add(61*time.Second)), ErrStaleRequest, 400, "stale_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.gw.Decapsulate(tc.msg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *RequestError", err)
			}
			if status, code := HTTPError(err); status != tc.status || code != tc.code {
				t.Errorf("HTTPError = %d %s, want %d %s", status, code, tc.status, tc.code)
			}
		})
	}

	// Replays: the accepted request comes back; then the cache fills.
	if _, err := gw.Decapsulate(okMsg); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Decapsulate(okMsg); !errors.Is(err, ErrReplayedRequest) {
		t.Fatalf("replay: %v", err)
	}
	// Edge of the window: still remembered 60 s later (timestamp + skew).
	clk.t = vectorTime.Add(60 * time.Second)
	if _, err := gw.Decapsulate(okMsg); !errors.Is(err, ErrReplayedRequest) {
		t.Fatalf("replay at the window's edge: %v", err)
	}
	// One second later it is stale rather than remembered.
	clk.t = vectorTime.Add(61 * time.Second)
	if _, err := gw.Decapsulate(okMsg); !errors.Is(err, ErrStaleRequest) {
		t.Fatalf("replay after the window: %v", err)
	}
	for i := range 3 {
		if _, err := gw.Decapsulate(good(keys.SuiteX25519AES128GCM, x.Config(), clk.t)); err != nil {
			t.Fatalf("fresh request %d: %v", i, err)
		}
	}
	_, err := gw.Decapsulate(good(keys.SuiteX25519AES128GCM, x.Config(), clk.t))
	if !errors.Is(err, ErrReplayCacheFull) {
		t.Fatalf("full cache: %v", err)
	}
	if s, c := HTTPError(err); s != http.StatusServiceUnavailable || c != "replay_cache_full" {
		t.Errorf("HTTPError = %d %s", s, c)
	}
	if n := gw.Replay.Len(); n != 3 {
		t.Errorf("cache holds %d entries, capacity 3", n)
	}
	// Once the window passes, entries are dropped and requests flow again.
	clk.t = clk.t.Add(2 * time.Minute)
	if _, err := gw.Decapsulate(good(keys.SuiteX25519AES128GCM, x.Config(), clk.t)); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if n := gw.Replay.Len(); n != 1 {
		t.Errorf("cache holds %d entries after expiry, want 1", n)
	}

	// Fail closed: a gateway without a replay cache, a closed key.
	if _, err := (&Gateway{Keys: gw.Keys}).Decapsulate(okMsg); err == nil {
		t.Error("gateway without a replay cache accepted a request")
	}
	gw.Keys.Close()
	clk.t = vectorTime
	if _, err := gw.Decapsulate(good(keys.SuiteX25519AES128GCM, x.Config(), vectorTime)); !errors.Is(err, keys.ErrKeyClosed) {
		t.Errorf("closed key: %v", err)
	}
	if s, _ := HTTPError(errors.New("other")); s != 500 {
		t.Errorf("unknown error maps to %d", s)
	}
}

func TestReplayCacheConfig(t *testing.T) {
	if _, err := NewReplayCache(0, time.Minute, nil); err == nil {
		t.Error("capacity 0 accepted")
	}
	if _, err := NewReplayCache(10, time.Millisecond, nil); err == nil {
		t.Error("sub-second skew accepted")
	}
	rc, err := NewReplayCache(10, 90*time.Second, nil)
	if err != nil || rc.MaxSkew() != 90*time.Second {
		t.Fatalf("%v %v", rc, err)
	}
	if err := rc.Check([]byte("enc"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := rc.Check([]byte("enc"), time.Now()); !errors.Is(err, ErrReplayedRequest) {
		t.Fatal(err)
	}
}

func TestRequestPlaintext(t *testing.T) {
	r := newRequest(t, vectorTime, "/v1/models", "")
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRequest(b)
	if err != nil || back.Path != r.Path || len(back.Body) != 0 || !back.Time.Equal(r.Time) {
		t.Fatalf("%+v %v", back, err)
	}
	for _, p := range []string{"", "v1", "/a b", "/" + strings.Repeat("a", 255), "/\xff"} {
		r.Path = p
		if _, err := r.MarshalBinary(); !errors.Is(err, ErrMalformedPlaintext) {
			t.Errorf("path %q: %v", p, err)
		}
	}
	r.Path = "/ok"
	r.Time = time.Unix(-5, 0)
	if _, err := r.MarshalBinary(); err == nil {
		t.Error("negative time accepted")
	}
	huge := append(bytes.Clone(b[:16]), 0xff, 0, 0, 0, 0, 0, 0, 0, 1, '/')
	if _, err := ParseRequest(huge); !errors.Is(err, ErrMalformedPlaintext) {
		t.Errorf("huge timestamp: %v", err)
	}
}

func TestEncapsulateRejects(t *testing.T) {
	ks := vectorKeySet(t)
	xw, _ := ks.Lookup(1)
	req := newRequest(t, vectorTime, "/v1/completions", "{}")
	var se *keys.SuiteError
	if _, _, err := EncapsulateRequest(xw.Config(), keys.SuiteX25519AES128GCM, req); !errors.As(err, &se) {
		t.Errorf("suite not offered: %v", err)
	}
	bad := xw.Config()
	bad.PublicKey = bad.PublicKey[:10]
	if _, _, err := EncapsulateRequest(bad, keys.DefaultSuite, req); err == nil {
		t.Error("bad key config accepted")
	}
	req.Path = "nope"
	if _, _, err := EncapsulateRequest(xw.Config(), keys.DefaultSuite, req); !errors.Is(err, ErrMalformedPlaintext) {
		t.Errorf("bad path: %v", err)
	}
}

// TestClientKeyReuse encapsulates many requests with one parsed ClientKey:
// each has a fresh encapsulated key, and each opens, answers and is
// answered; the ClientKey keeps its own copy of the configuration.
func TestClientKeyReuse(t *testing.T) {
	gw, _ := testGateway(t, 64)
	for _, tc := range allSuites {
		kp, _ := gw.Keys.Lookup(tc.keyID)
		cfg := kp.Config()
		ck, err := NewClientKey(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.PublicKey[0] ^= 1 // the caller's copy; the ClientKey must not see it
		if got := ck.Config(); !bytes.Equal(got.PublicKey, kp.Config().PublicKey) {
			t.Fatal("ClientKey shares the caller's public key bytes")
		}
		seen := map[string]bool{}
		for i := range 4 {
			msg, cr, err := ck.Encapsulate(tc.suite, newRequest(t, vectorTime, "/v1/completions", fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			info, _ := keys.KEMInfo(tc.suite.KEM)
			enc := string(msg[HeaderSize : HeaderSize+info.Nenc])
			if seen[enc] {
				t.Fatalf("%s: encapsulated key reused", tc.suite)
			}
			seen[enc] = true
			sr, err := gw.Decapsulate(msg)
			if err != nil {
				t.Fatalf("%s: %v", tc.suite, err)
			}
			if string(sr.Body) != fmt.Sprint(i) {
				t.Fatalf("%s: body %q", tc.suite, sr.Body)
			}
			resp, err := sr.SealResponse(nil, []byte("answer"))
			if err != nil {
				t.Fatal(err)
			}
			if pt, err := cr.OpenResponse(resp); err != nil || string(pt) != "answer" {
				t.Fatalf("%s: response %q, %v", tc.suite, pt, err)
			}
		}
	}
	ks := vectorKeySet(t)
	xw, _ := ks.Lookup(1)
	ck, err := NewClientKey(xw.Config())
	if err != nil {
		t.Fatal(err)
	}
	var se *keys.SuiteError
	if _, _, err := ck.Encapsulate(keys.SuiteX25519AES128GCM, newRequest(t, vectorTime, "/v1/completions", "{}")); !errors.As(err, &se) {
		t.Errorf("suite not offered: %v", err)
	}
	bad := xw.Config()
	bad.PublicKey = bad.PublicKey[:10]
	if _, err := NewClientKey(bad); err == nil {
		t.Error("bad key config accepted")
	}
}

func TestServerSideErrors(t *testing.T) {
	gw, _ := testGateway(t, 8)
	x, _ := gw.Keys.Lookup(2)
	msg, _, err := EncapsulateRequest(x.Config(), keys.SuiteX25519AES128GCM, newRequest(t, vectorTime, "/v1/completions", "{}"))
	if err != nil {
		t.Fatal(err)
	}
	sr, err := gw.Decapsulate(msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.CheckPath("/v1/completions"); err != nil {
		t.Fatal(err)
	}
	err = sr.CheckPath("/v1/chat/completions")
	if !errors.Is(err, ErrPathMismatch) {
		t.Fatalf("%v", err)
	}
	status, body := ErrorJSON(err)
	if status != 400 || string(body) != `{"error":{"message":"ohttp: request path does not match the url path: request sent to \"/v1/chat/completions\"","type":"invalid_request_error","code":"path_mismatch"}}` {
		t.Errorf("ErrorJSON = %d %s", status, body)
	}
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{ErrEncryptionRequired, 415, "encryption_required"},
		{ErrUnsupportedMediaType, 415, "unsupported_media_type"},
	} {
		if s, c := HTTPError(&RequestError{Err: tc.err}); s != tc.status || c != tc.code {
			t.Errorf("%v: %d %s", tc.err, s, c)
		}
	}
	status, body = ErrorJSON(errors.New("secret internals"))
	if status != 500 || strings.Contains(string(body), "secret") || !strings.Contains(string(body), `"type":"server_error"`) {
		t.Errorf("ErrorJSON(other) = %d %s", status, body)
	}
	status, body = ErrorJSON(&RequestError{Err: ErrReplayCacheFull})
	if status != 503 || !strings.Contains(string(body), `"code":"replay_cache_full"`) {
		t.Errorf("ErrorJSON(full) = %d %s", status, body)
	}
}

// Errors about a decrypted plaintext never echo it: they may travel back in
// the clear and reach logs.
func TestPlaintextErrorsDoNotQuotePlaintext(t *testing.T) {
	gw, _ := testGateway(t, 8)
	x, _ := gw.Keys.Lookup(2)
	p, _ := newRequest(t, vectorTime, "/v1/completions", "{}").MarshalBinary()
	secret := "/SECRET PROMPT"
	bad := append(append(p[:25:25], byte(len(secret))), secret...)
	_, err := gw.Decapsulate(sealRaw(t, x.Config(), Header(2, keys.SuiteX25519AES128GCM), bad, keys.SuiteX25519AES128GCM))
	if !errors.Is(err, ErrMalformedPlaintext) {
		t.Fatal(err)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("error quotes the plaintext: %v", err)
	}
}

// Concurrent copies of one request: exactly one is accepted.
func TestReplayConcurrent(t *testing.T) {
	gw, _ := testGateway(t, 64)
	x, _ := gw.Keys.Lookup(2)
	msg, _, err := EncapsulateRequest(x.Config(), keys.SuiteX25519AES128GCM, newRequest(t, vectorTime, "/v1/completions", "{}"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := gw.Decapsulate(msg)
			errs <- err
		}()
	}
	ok := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrReplayedRequest):
			t.Errorf("unexpected error %v", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d copies accepted, want 1", ok)
	}
}

package ohttp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/sparkinfer/cc/keys"
)

// Chunk flags (the first byte of every response chunk).
const (
	flagMore  = 0x00
	flagFinal = 0x01
)

// finalAAD is the associated data of the final chunk; other chunks have
// empty associated data.
const finalAAD = "final"

// classifyWindow bounds the chunk indexes tried when a chunk fails to open,
// to tell reordering and duplication from tampering.
const classifyWindow = 32

// maxChunks bounds the number of chunks in one response, far below the
// point where the counter could wrap.
const maxChunks = 1 << 32

// deriveResponseKey implements RFC 9458 section 4.4 with our label:
//
//	secret     = context.Export("sparkinfer response v1", max(Nn, Nk))
//	salt       = enc || response_nonce
//	prk        = Extract(salt, secret)
//	aead_key   = Expand(prk, "key", Nk)
//	aead_nonce = Expand(prk, "nonce", Nn)
func deriveResponseKey(s keys.Suite, secret, enc, responseNonce []byte) (cipher.AEAD, []byte, error) {
	key, nonce, err := responseKeyBytes(s, secret, enc, responseNonce)
	if err != nil {
		return nil, nil, err
	}
	defer clear(key)
	var aead cipher.AEAD
	switch s.AEAD {
	case keys.AEADAES128GCM:
		b, err := aes.NewCipher(key)
		if err != nil {
			return nil, nil, err
		}
		aead, err = cipher.NewGCM(b)
		if err != nil {
			return nil, nil, err
		}
	case keys.AEADChaCha20Poly1305:
		aead, err = chacha20poly1305.New(key)
		if err != nil {
			return nil, nil, err
		}
	}
	return aead, nonce, nil
}

func responseKeyBytes(s keys.Suite, secret, enc, responseNonce []byte) (key, nonce []byte, err error) {
	nk, nn, _, err := keys.AEADSizes(s.AEAD)
	if err != nil {
		return nil, nil, err
	}
	if s.KDF != keys.KDFHKDFSHA256 {
		return nil, nil, &keys.UnsupportedError{Kind: "kdf", ID: s.KDF}
	}
	salt := make([]byte, 0, len(enc)+len(responseNonce))
	salt = append(append(salt, enc...), responseNonce...)
	prk, err := hkdf.Extract(sha256.New, secret, salt)
	if err != nil {
		return nil, nil, err
	}
	defer clear(prk)
	if key, err = hkdf.Expand(sha256.New, prk, "key", nk); err != nil {
		return nil, nil, err
	}
	if nonce, err = hkdf.Expand(sha256.New, prk, "nonce", nn); err != nil {
		return nil, nil, err
	}
	return key, nonce, nil
}

// chunkNonce is base XOR the big-endian counter, right-aligned.
func chunkNonce(dst, base []byte, counter uint64) []byte {
	dst = append(dst[:0], base...)
	var c [8]byte
	binary.BigEndian.PutUint64(c[:], counter)
	for i := range 8 {
		dst[len(dst)-8+i] ^= c[i]
	}
	return dst
}

func chunkAAD(flags byte) []byte {
	if flags == flagFinal {
		return []byte(finalAAD)
	}
	return nil
}

// ResponseWriter seals a response chunk by chunk:
//
//	Response  = Response Nonce (max(Nn, Nk) bytes) || Chunk ... || final Chunk
//	Chunk     = Flags (8) || Length (32) || sealed chunk (Length bytes)
//
// Write seals non-final chunks; Final seals the last one. Each chunk is
// written to the underlying writer with one Write call (the first one
// prefixed by the response nonce), so an http.Flusher can flush after each.
// A ResponseWriter is not safe for concurrent use.
type ResponseWriter struct {
	w       io.Writer
	nonce   []byte
	started bool
	aead    cipher.AEAD
	base    []byte
	counter uint64
	done    bool
	err     error
	scratch []byte
}

// NewResponseWriter starts the response to r, reading the response nonce
// from rand (nil means crypto/rand). Nothing is written until the first
// chunk.
func (r *ServerRequest) NewResponseWriter(w io.Writer, rnd io.Reader) (*ResponseWriter, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	n, err := responseSecretSize(r.Suite)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, n)
	if _, err := io.ReadFull(rnd, nonce); err != nil {
		return nil, fmt.Errorf("ohttp: reading response nonce: %w", err)
	}
	aead, base, err := deriveResponseKey(r.Suite, r.secret, r.enc, nonce)
	if err != nil {
		return nil, err
	}
	return &ResponseWriter{w: w, nonce: nonce, aead: aead, base: base}, nil
}

// Write seals p as one non-final chunk (several when p is longer than
// MaxChunkSize). An empty p writes nothing.
func (rw *ResponseWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), MaxChunkSize)
		if err := rw.chunk(flagMore, p[:k]); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// Final seals p as the final chunk (preceded by non-final chunks when p is
// longer than MaxChunkSize) and ends the response. p may be empty. A
// response without a call to Final is read as truncated by the client.
func (rw *ResponseWriter) Final(p []byte) error {
	for len(p) > MaxChunkSize {
		if err := rw.chunk(flagMore, p[:MaxChunkSize]); err != nil {
			return err
		}
		p = p[MaxChunkSize:]
	}
	return rw.chunk(flagFinal, p)
}

func (rw *ResponseWriter) chunk(flags byte, p []byte) error {
	if rw.err != nil {
		return rw.err
	}
	if rw.done {
		return errors.New("ohttp: write after the final response chunk")
	}
	if rw.counter >= maxChunks {
		rw.err = errors.New("ohttp: too many response chunks")
		return rw.err
	}
	b := rw.scratch[:0]
	if !rw.started {
		b = append(b, rw.nonce...)
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)+rw.aead.Overhead()))
	var nonce [24]byte
	b = rw.aead.Seal(b, chunkNonce(nonce[:0], rw.base, rw.counter), p, chunkAAD(flags))
	rw.scratch = b
	if _, err := rw.w.Write(b); err != nil {
		rw.err = fmt.Errorf("ohttp: writing response chunk: %w", err)
		return rw.err
	}
	rw.started = true
	rw.counter++
	if flags == flagFinal {
		rw.done = true
	}
	return nil
}

// SealResponse seals a whole (non-streamed) response body: the response
// nonce and one final chunk (more when body exceeds MaxChunkSize).
func (r *ServerRequest) SealResponse(rnd io.Reader, body []byte) ([]byte, error) {
	var out sliceWriter
	rw, err := r.NewResponseWriter(&out, rnd)
	if err != nil {
		return nil, err
	}
	if err := rw.Final(body); err != nil {
		return nil, err
	}
	return out, nil
}

type sliceWriter []byte

func (s *sliceWriter) Write(p []byte) (int, error) {
	*s = append(*s, p...)
	return len(p), nil
}

// ResponseReader opens a response stream chunk by chunk. Next returns io.EOF
// only after the final chunk was read and authenticated and the stream
// ended right after it; every other failure is a [*StreamError] (or the
// underlying reader's error). A ResponseReader is not safe for concurrent
// use.
type ResponseReader struct {
	r       io.Reader
	c       *ClientRequest
	aead    cipher.AEAD
	base    []byte
	counter uint64
	done    bool
	err     error
	pending []byte // plaintext not yet returned by Read
}

// NewResponseReader reads the response to c from r.
func (c *ClientRequest) NewResponseReader(r io.Reader) *ResponseReader {
	return &ResponseReader{r: r, c: c}
}

func (rr *ResponseReader) fail(err error) ([]byte, error) {
	rr.err = err
	return nil, err
}

func (rr *ResponseReader) readFull(b []byte, what string) error {
	if _, err := io.ReadFull(rr.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &StreamError{Err: ErrTruncated, Chunk: rr.counter, Detail: "stream ended in or before " + what}
		}
		return fmt.Errorf("ohttp: reading response %s: %w", what, err)
	}
	return nil
}

// Next returns the plaintext of the next chunk (possibly empty).
func (rr *ResponseReader) Next() ([]byte, error) {
	if rr.err != nil {
		return nil, rr.err
	}
	if rr.done {
		return nil, io.EOF
	}
	if rr.aead == nil {
		n, err := responseSecretSize(rr.c.suite)
		if err != nil {
			return rr.fail(err)
		}
		nonce := make([]byte, n)
		if err := rr.readFull(nonce, "response nonce"); err != nil {
			return rr.fail(err)
		}
		rr.aead, rr.base, err = deriveResponseKey(rr.c.suite, rr.c.secret, rr.c.enc, nonce)
		if err != nil {
			return rr.fail(err)
		}
	}
	var hdr [chunkHeaderSize]byte
	if err := rr.readFull(hdr[:], "chunk header"); err != nil {
		return rr.fail(err)
	}
	flags := hdr[0]
	size := int64(binary.BigEndian.Uint32(hdr[1:]))
	nt := int64(rr.aead.Overhead())
	if flags != flagMore && flags != flagFinal {
		return rr.fail(&StreamError{Err: ErrMalformedChunk, Chunk: rr.counter, Detail: fmt.Sprintf("flags 0x%02x, want 0x00 or 0x01", flags)})
	}
	if size < nt || size > nt+MaxChunkSize {
		return rr.fail(&StreamError{Err: ErrMalformedChunk, Chunk: rr.counter, Detail: fmt.Sprintf("length %d, want %d to %d", size, nt, nt+MaxChunkSize)})
	}
	sealed := make([]byte, size)
	if err := rr.readFull(sealed, "chunk body"); err != nil {
		return rr.fail(err)
	}
	var nonce [24]byte
	pt, err := rr.aead.Open(nil, chunkNonce(nonce[:0], rr.base, rr.counter), sealed, chunkAAD(flags))
	if err != nil {
		return rr.fail(rr.classify(flags, sealed))
	}
	rr.counter++
	if flags == flagFinal {
		var one [1]byte
		n, err := io.ReadFull(rr.r, one[:])
		switch {
		case n > 0:
			return rr.fail(&StreamError{Err: ErrAfterFinal, Chunk: rr.counter})
		case errors.Is(err, io.EOF):
			rr.done = true
		default:
			return rr.fail(fmt.Errorf("ohttp: reading after the final response chunk: %w", err))
		}
	} else if rr.counter >= maxChunks {
		return rr.fail(&StreamError{Err: ErrMalformedChunk, Chunk: rr.counter, Detail: "too many chunks"})
	}
	return pt, nil
}

// classify explains why a chunk failed to open at index rr.counter by
// trying nearby indexes and the other flag. It only reports what an
// authenticated trial open showed.
func (rr *ResponseReader) classify(flags byte, sealed []byte) error {
	var nonce [24]byte
	try := func(counter uint64, aad []byte) bool {
		_, err := rr.aead.Open(nil, chunkNonce(nonce[:0], rr.base, counter), sealed, aad)
		return err == nil
	}
	for j := rr.counter + 1; j <= rr.counter+classifyWindow; j++ {
		if try(j, chunkAAD(flags)) {
			return &StreamError{Err: ErrReordered, Chunk: rr.counter, Got: j}
		}
	}
	lo := uint64(0)
	if rr.counter > classifyWindow {
		lo = rr.counter - classifyWindow
	}
	for j := rr.counter; j > lo; j-- {
		if try(j-1, chunkAAD(flags)) {
			return &StreamError{Err: ErrDuplicated, Chunk: rr.counter, Got: j - 1}
		}
	}
	if try(rr.counter, chunkAAD(flags^1)) {
		return &StreamError{Err: ErrChunkAuth, Chunk: rr.counter, Detail: "final flag altered"}
	}
	if rr.counter == 0 {
		return &StreamError{Err: ErrWrongKey, Chunk: 0}
	}
	return &StreamError{Err: ErrChunkAuth, Chunk: rr.counter}
}

// Read implements io.Reader over the concatenated chunk plaintexts, with
// Next's guarantees: io.EOF only at the authenticated end.
func (rr *ResponseReader) Read(p []byte) (int, error) {
	for len(rr.pending) == 0 {
		pt, err := rr.Next()
		if err != nil {
			return 0, err
		}
		rr.pending = pt
	}
	n := copy(p, rr.pending)
	rr.pending = rr.pending[n:]
	return n, nil
}

// OpenResponse opens a whole response held in memory and returns the
// concatenated plaintext of its chunks.
func (c *ClientRequest) OpenResponse(b []byte) ([]byte, error) {
	rr := c.NewResponseReader(&byteReader{b: b})
	var out []byte
	for {
		pt, err := rr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, pt...)
	}
}

type byteReader struct{ b []byte }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
